//! Server-sent events framing (<https://html.spec.whatwg.org/multipage/server-sent-events.html>),
//! as much of it as the Messages API's stream needs: `event:` and `data:` fields,
//! multi-line data, comments, and lines split across network reads at any byte
//! (even inside a UTF-8 character). `id:` and `retry:` are read and ignored: the API
//! does not resume streams.

/// One event: its name (`message` when the frame has no `event:` line) and data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) event: String,
    pub(crate) data: String,
}

/// Feeds bytes in, takes whole events out.
#[derive(Default)]
pub(crate) struct SseParser {
    /// Bytes after the last line break seen.
    partial: Vec<u8>,
    /// The previous read ended on `\r`: a `\n` starting the next one is the same break.
    after_cr: bool,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    /// The events completed by `bytes`.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        if self.after_cr && bytes.first() == Some(&b'\n') {
            start = 1;
            i = 1;
        }
        self.after_cr = false;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b'\n' || b == b'\r' {
                self.partial.extend_from_slice(&bytes[start..i]);
                let line = std::mem::take(&mut self.partial);
                self.line(&line, &mut out);
                if b == b'\r' {
                    if bytes.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    } else if i + 1 == bytes.len() {
                        self.after_cr = true;
                    }
                }
                start = i + 1;
            }
            i += 1;
        }
        self.partial
            .extend_from_slice(&bytes[start.min(bytes.len())..]);
        out
    }

    /// The event left when the stream closes without a final blank line.
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, &mut out);
        }
        self.line(b"", &mut out);
        out.pop()
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if !self.data.is_empty() || self.event.is_some() {
                let event = self.event.take().unwrap_or_else(|| "message".to_owned());
                let data = std::mem::take(&mut self.data).join("\n");
                out.push(SseEvent { event, data });
            }
            return;
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => self.data.push(value.to_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        let mut out: Vec<SseEvent> = chunks.iter().flat_map(|c| p.push(c)).collect();
        out.extend(p.finish());
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn frames_split_anywhere() {
        let text = "event: ping\ndata: {\"type\": \"ping\"}\n\n: comment\nevent: message_stop\r\ndata: {\"a\":\r\ndata: \"é\"}\r\n\r\ndata: tail";
        let want = vec![
            ev("ping", "{\"type\": \"ping\"}"),
            ev("message_stop", "{\"a\":\n\"é\"}"),
            ev("message", "tail"),
        ];
        assert_eq!(all(&[text.as_bytes()]), want);
        let bytes = text.as_bytes();
        for cut in 1..bytes.len() {
            assert_eq!(all(&[&bytes[..cut], &bytes[cut..]]), want, "cut at {cut}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(all(&singles), want);
    }
}
