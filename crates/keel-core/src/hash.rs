//! A stable hash: 64-bit FNV-1a, the same on every platform, toolchain and release.
//!
//! For values that leave the process or must not move between builds: summary cache
//! keys and the ids of summary messages (written into databases), advisory-lock keys
//! shared by processes of different releases, the scope terms of a recall index, and the
//! shapes the extractive summarizer compares (they decide which lines a summary keeps,
//! so `keel replay` figures depend on them). `std`'s `DefaultHasher` may change between
//! Rust releases and is seeded per process in a `HashMap`; this one never changes.
//!
//! FNV-1a is fast on short keys and not collision-resistant against chosen input: use it
//! for keys, never for anything an attacker could exploit by colliding. It is not a
//! cryptographic digest.
//!
//! Feed bytes incrementally with [`StableHasher::write`] (the result depends only on the
//! concatenation of what was written, not on how it was split), or hash one slice with
//! [`fnv1a`]:
//!
//! ```
//! use keel_core::hash::{StableHasher, fnv1a};
//!
//! let mut h = StableHasher::new();
//! h.write(b"foo");
//! h.write(b"bar");
//! assert_eq!(h.finish(), fnv1a(b"foobar"));
//! assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
//! ```
//!
//! Framing is the caller's: to hash several fields without `("ab", "c")` and
//! `("a", "bc")` colliding, write a separator byte after each field or its length before
//! it, as each caller's key format says.
//!
//! [`StableHasher`] also implements [`std::hash::Hasher`] (with
//! [`BuildHasherDefault`](std::hash::BuildHasherDefault) it keys a `HashMap` with short,
//! trusted keys quickly); its integer writes are little-endian on every platform, so
//! they are stable too.

/// The FNV-1a 64-bit offset basis: the state before any byte.
pub const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// The FNV 64-bit prime: each byte is xored into the state, then the state multiplied by it.
pub const PRIME: u64 = 0x0100_0000_01b3;

/// An incremental 64-bit FNV-1a hasher. See the [module docs](self).
///
/// ```
/// use keel_core::hash::StableHasher;
///
/// let mut h = StableHasher::new();
/// assert_eq!(h.finish(), 0xcbf2_9ce4_8422_2325); // nothing written: the offset basis
/// h.write_u8(b'a');
/// assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StableHasher(u64);

impl StableHasher {
    /// A hasher at the offset basis.
    pub const fn new() -> Self {
        StableHasher(OFFSET_BASIS)
    }

    /// A hasher starting from `state` instead of the offset basis: a seeded variant (one
    /// family of hashes per seed), or the state a [`finish`](Self::finish) returned, to
    /// go on hashing from there.
    ///
    /// ```
    /// use keel_core::hash::{OFFSET_BASIS, StableHasher};
    ///
    /// let mut whole = StableHasher::new();
    /// whole.write(b"ab");
    /// let mut first = StableHasher::new();
    /// first.write(b"a");
    /// let mut rest = StableHasher::with_state(first.finish());
    /// rest.write(b"b");
    /// assert_eq!(rest.finish(), whole.finish());
    /// assert_eq!(StableHasher::with_state(OFFSET_BASIS), StableHasher::new());
    /// ```
    pub const fn with_state(state: u64) -> Self {
        StableHasher(state)
    }

    /// Feeds `bytes`, one at a time.
    ///
    /// ```
    /// use keel_core::hash::{StableHasher, fnv1a};
    ///
    /// let mut h = StableHasher::new();
    /// h.write(b"PRJ-");
    /// h.write(b"123");
    /// assert_eq!(h.finish(), fnv1a(b"PRJ-123"));
    /// ```
    #[inline]
    pub fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
        self.0 = h;
    }

    /// Feeds one byte.
    ///
    /// ```
    /// use keel_core::hash::{StableHasher, fnv1a};
    ///
    /// let mut h = StableHasher::new();
    /// h.write_u8(0xff);
    /// assert_eq!(h.finish(), fnv1a(&[0xff]));
    /// ```
    #[inline]
    pub fn write_u8(&mut self, byte: u8) {
        self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(PRIME);
    }

    /// The hash of everything written so far (the hasher can go on).
    ///
    /// ```
    /// use keel_core::hash::StableHasher;
    ///
    /// let mut h = StableHasher::new();
    /// h.write(b"a");
    /// assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    /// ```
    #[inline]
    pub const fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for StableHasher {
    /// The same as [`StableHasher::new`].
    fn default() -> Self {
        StableHasher::new()
    }
}

/// The standard trait, for `HashMap`s. Integers are written little-endian and `usize` /
/// `isize` as 64 bits, so the output does not depend on the platform either.
impl std::hash::Hasher for StableHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        StableHasher::write(self, bytes);
    }
    fn write_u8(&mut self, i: u8) {
        StableHasher::write_u8(self, i);
    }
    fn write_u16(&mut self, i: u16) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_u32(&mut self, i: u32) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_u64(&mut self, i: u64) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_u128(&mut self, i: u128) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_usize(&mut self, i: usize) {
        StableHasher::write(self, &(i as u64).to_le_bytes());
    }
    fn write_i8(&mut self, i: i8) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_i16(&mut self, i: i16) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_i32(&mut self, i: i32) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_i64(&mut self, i: i64) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_i128(&mut self, i: i128) {
        StableHasher::write(self, &i.to_le_bytes());
    }
    fn write_isize(&mut self, i: isize) {
        StableHasher::write(self, &(i as i64).to_le_bytes());
    }
}

/// The 64-bit FNV-1a hash of `bytes`.
///
/// ```
/// use keel_core::hash::fnv1a;
///
/// assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
/// ```
#[inline]
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = StableHasher::new();
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault, Hash};

    use super::*;

    /// The hand-written loops this module replaced, kept as the reference.
    fn reference(seed: u64, bytes: &[u8]) -> u64 {
        let mut h = seed;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }

    #[test]
    fn known_values() {
        // The published FNV-1a 64 test vectors, then values the callers store.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        // A summary message's id (`summary-{:016x}`).
        assert_eq!(fnv1a(b"The user works on PRJ-123."), 0xb02b_d39c_a0b5_01c7);
        // A PostgreSQL lease key (the hash as i64).
        assert_eq!(fnv1a(b"thread-1") as i64, 3_214_755_371_066_863_583);
    }

    #[test]
    fn matches_the_reference_however_split() {
        let text = "I'm working on project PRJ-123 on the EU cluster. \u{1F600} ok";
        let bytes = text.as_bytes();
        for seed in [OFFSET_BASIS, OFFSET_BASIS ^ 7, 0, u64::MAX] {
            let whole = reference(seed, bytes);
            for cut in 0..=bytes.len() {
                let mut h = StableHasher::with_state(seed);
                h.write(&bytes[..cut]);
                h.write(&bytes[cut..]);
                assert_eq!(h.finish(), whole);
            }
            let mut h = StableHasher::with_state(seed);
            bytes.iter().for_each(|b| h.write_u8(*b));
            assert_eq!(h.finish(), whole);
        }
    }

    #[test]
    fn the_std_trait_is_the_same_hash() {
        // `str`'s `Hash` writes the bytes then 0xff: the keys of the tool-call index.
        let build = BuildHasherDefault::<StableHasher>::default();
        assert_eq!(build.hash_one("call_1"), 0x5f50_869c_000a_3222);
        assert_eq!(build.hash_one("call_1"), fnv1a(b"call_1\xff"));
        let mut h = build.build_hasher();
        0x0102_0304_u32.hash(&mut h);
        assert_eq!(
            std::hash::Hasher::finish(&h),
            fnv1a(&[0x04, 0x03, 0x02, 0x01])
        );
        let mut h = build.build_hasher();
        7usize.hash(&mut h);
        assert_eq!(std::hash::Hasher::finish(&h), fnv1a(&7u64.to_le_bytes()));
    }
}
