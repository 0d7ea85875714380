//! A [`ServiceInput`] read straight from a fuzzer's bytes: each choice the
//! [`strategy`](super::strategy) makes at random is made here by the next bytes,
//! with the same weights (but for checkpoint sizes, [`Decoder::size`]), so libFuzzer's mutations are mutations of the request
//! sequence (a byte more or less changes one field, not every value after it).
//!
//! Why not the strategy under a generator seeded from the bytes: building proptest's
//! value trees took most of each case's time and held the target to about 200
//! cases a second. Bytes that run out read as zeros (the first choice), so every
//! input decodes, and a request cut short is dropped.

use arbitrary::{Result, Unstructured};

use super::{MAX_REQUESTS, Op, Request, ServiceInput, Text, TokenPick};
use crate::corpus::{Mutation, NASTY, Pick};

/// Most bytes a decoded field holds before any repetition (the strategy's `.{0,40}`).
const MAX_FIELD_BYTES: usize = 40;

/// The request sequence `data` spells; `lines` are the corpus's field values.
pub fn decode(data: &[u8], lines: &[Vec<u8>]) -> ServiceInput {
    let u = Unstructured::new(data);
    let mut d = Decoder { u, lines };
    // A case on redb costs an fsync per write: one case in 32.
    let redb = d.flag(32).unwrap_or(false);
    let mut requests = Vec::new();
    while !d.u.is_empty() && requests.len() < MAX_REQUESTS {
        match d.request() {
            Ok(r) => requests.push(r),
            Err(_) => break,
        }
    }
    ServiceInput { redb, requests }
}

struct Decoder<'a> {
    u: Unstructured<'a>,
    lines: &'a [Vec<u8>],
}

impl Decoder<'_> {
    /// An index into `weights`, each chosen in proportion to its weight.
    fn weighted(&mut self, weights: &[u32]) -> Result<usize> {
        let total: u32 = weights.iter().sum();
        let mut x = self.u.int_in_range(0..=total - 1)?;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return Ok(i);
            }
            x -= w;
        }
        Ok(weights.len() - 1)
    }

    fn pick(&mut self) -> Result<Pick> {
        Ok(Pick(u64::from(self.u.arbitrary::<u8>()?)))
    }

    /// True one time in `one_in`, and never for a zero byte.
    fn flag(&mut self, one_in: u8) -> Result<bool> {
        Ok(self.u.int_in_range(1..=one_in)? == one_in)
    }

    fn number(&mut self) -> Result<u64> {
        Ok(match self.weighted(&[3, 1, 1])? {
            0 => self.u.int_in_range(0..=19)?,
            1 => self.u.arbitrary()?,
            _ => u64::MAX,
        })
    }

    /// A checkpoint's size: small, or rarely one byte past the limit (refused before
    /// it is hashed or stored). Never the limit itself: hashing, copying and storing
    /// an 8 MiB checkpoint costs as much as dozens of whole cases, and a corpus keeps
    /// such inputs (redb takes another path for large values), so they were most of
    /// libFuzzer's time. The proptest pass (`tests/fuzz.rs`, CI) sends the limit in
    /// one checkpoint of three.
    fn size(&mut self) -> Result<usize> {
        Ok(match self.weighted(&[127, 1])? {
            0 => self.u.int_in_range(0..=63)?,
            _ => railyard_model::limits::CHECKPOINT + 1,
        })
    }

    /// Up to `max` bytes, as the next byte counts them.
    fn some_bytes(&mut self, max: usize) -> Result<Vec<u8>> {
        let n = self.u.int_in_range(0..=max)?;
        let n = n.min(self.u.len());
        Ok(self.u.bytes(n)?.to_vec())
    }

    fn line(&mut self) -> Result<Vec<u8>> {
        if self.lines.is_empty() {
            return Ok(Vec::new());
        }
        let i = self.pick()?.index(self.lines.len());
        Ok(self.lines[i].clone())
    }

    fn mutation(&mut self) -> Result<Mutation> {
        Ok(match self.weighted(&[3, 2, 2, 1, 1, 2, 3, 1])? {
            0 => Mutation::FlipBit(self.pick()?, self.u.int_in_range(0..=7)?),
            1 => Mutation::SetByte(self.pick()?, self.u.arbitrary()?),
            2 => Mutation::Delete(self.pick()?, self.pick()?),
            3 => Mutation::Truncate(self.pick()?),
            4 => Mutation::Duplicate(self.pick()?, self.pick()?),
            5 => {
                let at = self.pick()?;
                let mut bytes = self.some_bytes(7)?;
                if bytes.is_empty() {
                    bytes.push(0);
                }
                Mutation::Insert(at, bytes)
            }
            6 => Mutation::InsertNasty(self.pick()?, self.pick()?),
            _ => Mutation::Splice(self.pick()?, self.pick()?, self.pick()?),
        })
    }

    fn mutated(&mut self, mut bytes: Vec<u8>, most: usize) -> Result<String> {
        let n = self.u.int_in_range(1..=most)?;
        for _ in 0..n {
            let m = self.mutation()?;
            crate::corpus::apply(&mut bytes, &m, self.lines);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// As [`crate::corpus::field_text`] draws them.
    fn field_text(&mut self) -> Result<String> {
        Ok(match self.weighted(&[3, 2, 2, 1, 1, 2])? {
            0 => String::from_utf8_lossy(&self.line()?).into_owned(),
            1 => NASTY[self.pick()?.index(NASTY.len())].to_string(),
            2 => String::from_utf8_lossy(&self.some_bytes(MAX_FIELD_BYTES)?).into_owned(),
            3 => {
                let n = self.u.int_in_range(1..=8)?;
                let mut s = String::new();
                for _ in 0..n {
                    // A control character: 0x00-0x1f, or DEL for 0x20.
                    let b = self.u.int_in_range(0u8..=0x20)?;
                    s.push(char::from(if b == 0x20 { 0x7f } else { b }));
                }
                s
            }
            4 => {
                let c: char = self.u.arbitrary()?;
                let n = [129usize, 128, 70_000, 300_000][self.pick()?.index(4)];
                c.to_string().repeat(n / c.len_utf8())
            }
            _ => {
                let line = self.line()?;
                self.mutated(line, 8)?
            }
        })
    }

    fn text(&mut self) -> Result<Text> {
        const GOOD: [&str; 10] = [
            "two",
            "demo",
            "default",
            "q",
            "a",
            "steer",
            "{}",
            "https://example.com/cb",
            "reg",
            super::REGISTERED,
        ];
        Ok(match self.weighted(&[3, 2, 2])? {
            0 => Text::Any(self.field_text()?),
            1 => Text::Run(self.pick()?),
            _ => Text::Good(GOOD[self.pick()?.index(GOOD.len())]),
        })
    }

    fn token(&mut self) -> Result<TokenPick> {
        Ok(match self.weighted(&[4, 2, 2, 1])? {
            0 => TokenPick::Latest,
            1 => TokenPick::Leased(self.pick()?),
            2 => {
                let at = self.pick()?;
                let n = self.u.int_in_range(1..=2)?;
                let ms = (0..n).map(|_| self.mutation()).collect::<Result<_>>()?;
                TokenPick::Mutated(at, ms)
            }
            _ => TokenPick::Any(self.field_text()?),
        })
    }

    fn pairs(&mut self) -> Result<Vec<(Text, Text)>> {
        let n = self.u.int_in_range(0..=2)?;
        (0..n).map(|_| Ok((self.text()?, self.text()?))).collect()
    }

    fn texts(&mut self) -> Result<Vec<Text>> {
        let n = self.u.int_in_range(0..=2)?;
        (0..n).map(|_| self.text()).collect()
    }

    fn maybe<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<Option<T>> {
        Ok(if self.u.arbitrary::<bool>()? {
            Some(f(self)?)
        } else {
            None
        })
    }

    fn request(&mut self) -> Result<Request> {
        let caller = if self.flag(7)? {
            Some((self.text()?, self.text()?))
        } else {
            None
        };
        Ok(Request {
            caller,
            op: self.op()?,
        })
    }

    fn op(&mut self) -> Result<Op> {
        Ok(
            match self.weighted(&[6, 2, 2, 1, 3, 1, 1, 1, 1, 5, 3, 4, 3, 1, 1, 1])? {
                0 => Op::Start {
                    workflow: self.text()?,
                    run: self.text()?,
                    goal: self.text()?,
                    context: self.pairs()?,
                    request_id: self.text()?,
                    parent: self.text()?,
                    callback: self.text()?,
                    queue: self.text()?,
                    allow_duplicate: self.flag(10)?,
                },
                1 => Op::Describe(self.text()?),
                2 => Op::History {
                    run: self.text()?,
                    from: self.number()?,
                    page: self.u.int_in_range(0..=1999)?,
                },
                3 => Op::List {
                    status: self.maybe(Self::pick)?,
                    workflow: self.maybe(Self::text)?,
                    parent: self.maybe(Self::text)?,
                    after: self.maybe(|d| d.u.arbitrary())?,
                    before: self.maybe(|d| d.u.arbitrary())?,
                    token: self.text()?,
                    page: self.u.arbitrary()?,
                },
                4 => Op::Signal {
                    run: self.text()?,
                    name: self.text()?,
                    payload: self.text()?,
                    request_id: self.text()?,
                },
                5 => Op::Cancel {
                    run: self.text()?,
                    reason: self.text()?,
                },
                6 => Op::Terminate {
                    run: self.text()?,
                    reason: self.text()?,
                },
                7 => Op::Tree(self.text()?),
                8 => Op::Watch {
                    run: self.text()?,
                    from: self.number()?,
                },
                9 => Op::Poll { queue: self.text()? },
                10 => Op::Heartbeat {
                    token: self.token()?,
                    checkpoint: self.size()?,
                    notes: self.pairs()?,
                    acked: self.number()?,
                },
                11 => Op::Complete {
                    token: self.token()?,
                    notes: self.text()?,
                    artifacts: self.texts()?,
                    context: self.pairs()?,
                    take_next: self.u.arbitrary()?,
                },
                12 => Op::Fail {
                    token: self.token()?,
                    error_type: self.text()?,
                    message: self.text()?,
                    non_retryable: self.u.arbitrary()?,
                    checkpoint: self.size()?,
                },
                13 => Op::DescribeQueue(self.text()?),
                14 => Op::GetWorkflow(self.text()?),
                _ => Op::RegisterWorkflow(self.text()?),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_decodes_and_more_bytes_mean_more_requests() {
        let lines = vec![b"line".to_vec()];
        assert!(decode(b"", &lines).requests.is_empty());
        for len in [1usize, 7, 64, 4096] {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let input = decode(&data, &lines);
            assert!(input.requests.len() <= MAX_REQUESTS);
        }
        // Zeros are the first choice everywhere: starts of the first kind.
        let zeros = decode(&[0u8; 64], &lines);
        assert!(!zeros.redb);
        assert!(zeros.requests.iter().all(|r| matches!(r.op, Op::Start { .. })));
        assert!(!zeros.requests.is_empty());
    }
}
