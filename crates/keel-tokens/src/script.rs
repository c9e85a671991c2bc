//! Script-aware character weights for the approximate counter.
//!
//! `chars / 4` is calibrated on English. BPE tokenizers trained mostly on Latin text
//! spend about one token per CJK ideograph, kana or Hangul syllable, and one to three
//! per emoji, so chars/4 under-counts such text 2-4x. This module sorts code points
//! into a few classes and weighs each class by its typical tokens per character. The
//! weights are set from o200k_base and cl100k_base counts over the committed fixture
//! (`tests/fixtures/tiktoken_texts.json`) and err on the high side, because an
//! over-count only triggers a summary early while an under-count overflows the model.

/// A class of code points with one token weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CharClass {
    /// ASCII and Latin-script letters, digits and punctuation: `1 / chars_per_token`.
    Latin,
    /// Cyrillic, Greek, Armenian, Georgian: alphabetic scripts with fewer merges.
    Alphabetic,
    /// Arabic, Hebrew, Indic scripts, Thai and other abugidas: most characters are
    /// rare byte sequences for the tokenizer.
    Abugida,
    /// CJK ideographs, kana, Hangul, CJK punctuation and full-width forms.
    Cjk,
    /// Emoji and pictographs (4-byte UTF-8 sequences the vocabulary rarely merges).
    Emoji,
}

impl CharClass {
    /// The class of one code point.
    pub fn of(c: char) -> CharClass {
        let cp = c as u32;
        match cp {
            0..=0x2ff => CharClass::Latin,
            0x370..=0x58f | 0x10a0..=0x10ff => CharClass::Alphabetic,
            0x590..=0x8ff | 0x900..=0xdff | 0xe00..=0xfff | 0x1000..=0x109f | 0x1780..=0x17ff => {
                CharClass::Abugida
            }
            0x1100..=0x11ff
            | 0x2e80..=0x2fdf
            | 0x3000..=0x303f
            | 0x3040..=0x30ff
            | 0x3100..=0x31ff
            | 0x3200..=0x4dbf
            | 0x4e00..=0x9fff
            | 0xa960..=0xa97f
            | 0xac00..=0xd7ff
            | 0xf900..=0xfaff
            | 0xfe30..=0xfe4f
            | 0xff00..=0xffef
            | 0x20000..=0x3ffff => CharClass::Cjk,
            0x2190..=0x21ff | 0x2300..=0x23ff | 0x2600..=0x27bf | 0x2b00..=0x2bff => {
                CharClass::Emoji
            }
            0x1f000..=0x1faff => CharClass::Emoji,
            _ => CharClass::Latin,
        }
    }

    /// Tokens per character of this class (Latin is handled by `chars_per_token`).
    fn weight(self) -> f64 {
        match self {
            CharClass::Latin => 0.0,
            CharClass::Alphabetic => 0.5,
            CharClass::Abugida => 0.8,
            CharClass::Cjk => 1.1,
            CharClass::Emoji => 2.0,
        }
    }
}

/// Character counts per class for one piece of text (or one message).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// Latin-class characters.
    pub latin: usize,
    /// Alphabetic-class characters.
    pub alphabetic: usize,
    /// Abugida-class characters.
    pub abugida: usize,
    /// CJK-class characters.
    pub cjk: usize,
    /// Emoji-class characters.
    pub emoji: usize,
}

impl ClassCounts {
    /// Adds the characters of `s`.
    pub fn add(&mut self, s: &str) {
        let mut rest = s;
        while !rest.is_empty() {
            // Mixed text is mostly ASCII runs: count a run by its length, then classify
            // the non-ASCII stretch character by character.
            let ascii = rest
                .bytes()
                .position(|b| !b.is_ascii())
                .unwrap_or(rest.len());
            self.latin += ascii;
            rest = &rest[ascii..];
            let mut chars = rest.char_indices();
            let mut end = rest.len();
            for (i, c) in chars.by_ref() {
                if c.is_ascii() {
                    end = i;
                    break;
                }
                match CharClass::of(c) {
                    CharClass::Latin => self.latin += 1,
                    CharClass::Alphabetic => self.alphabetic += 1,
                    CharClass::Abugida => self.abugida += 1,
                    CharClass::Cjk => self.cjk += 1,
                    CharClass::Emoji => self.emoji += 1,
                }
            }
            rest = &rest[end..];
        }
    }

    /// Estimated tokens (not rounded): Latin characters at `1 / chars_per_token`, the
    /// rest at their class weight.
    pub fn tokens(&self, chars_per_token: f64) -> f64 {
        self.latin as f64 / chars_per_token
            + self.alphabetic as f64 * CharClass::Alphabetic.weight()
            + self.abugida as f64 * CharClass::Abugida.weight()
            + self.cjk as f64 * CharClass::Cjk.weight()
            + self.emoji as f64 * CharClass::Emoji.weight()
    }
}

/// Script-aware token estimate of a plain text, rounded up.
pub fn estimate(text: &str, chars_per_token: f64) -> u64 {
    let mut counts = ClassCounts::default();
    counts.add(text);
    counts.tokens(chars_per_token).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(CharClass::of('a'), CharClass::Latin);
        assert_eq!(CharClass::of('é'), CharClass::Latin);
        assert_eq!(CharClass::of('中'), CharClass::Cjk);
        assert_eq!(CharClass::of('か'), CharClass::Cjk);
        assert_eq!(CharClass::of('한'), CharClass::Cjk);
        assert_eq!(CharClass::of('😀'), CharClass::Emoji);
        assert_eq!(CharClass::of('ж'), CharClass::Alphabetic);
        assert_eq!(CharClass::of('ก'), CharClass::Abugida);
    }

    #[test]
    fn ascii_runs_and_non_ascii_stretches_are_all_counted() {
        let mut c = ClassCounts::default();
        c.add("ab中文c😀éd ж");
        assert_eq!(
            c,
            ClassCounts {
                latin: 6,
                alphabetic: 1,
                abugida: 0,
                cjk: 2,
                emoji: 1
            }
        );
    }

    #[test]
    fn cjk_weighs_more_than_latin() {
        assert_eq!(estimate("abcdefgh", 4.0), 2);
        assert!(estimate("中文中文中文中文", 4.0) >= 8);
    }
}
