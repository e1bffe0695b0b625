//! What the fuzz tests share: a reproducible random stream and the case count.
#![allow(dead_code)]

/// xorshift64*: a reproducible stream of random numbers without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Random bytes, mostly `typical` long (a decoder's fixed size), sometimes up to 63.
    pub fn bytes(&mut self, typical: usize) -> Vec<u8> {
        let len = if self.next() % 4 == 0 { self.below(64) } else { typical };
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Cases per run: `UCXA_TEST_FUZZ_CASES` (default 20 000; `scripts/reliability.sh`: 1 000 000).
pub fn cases() -> usize {
    std::env::var("UCXA_TEST_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}
