//! The words synthetic messages are made of: a vocabulary ranked like real text, where a few
//! words are everywhere and most are rare (Zipf's law), with the hyphenated and dotted tokens
//! people paste into chats.

use std::sync::LazyLock;

use rand::{Rng, RngExt};

/// Everyday and technical words, most frequent first.
#[rustfmt::skip]
const COMMON: &[&str] = &[
    "the", "to", "and", "a", "of", "is", "in", "it", "you", "that", "for", "on", "with", "this",
    "i", "be", "not", "we", "can", "are", "as", "have", "but", "if", "or", "at", "from", "was",
    "so", "do", "what", "error", "when", "how", "all", "there", "session", "will", "just", "one",
    "server", "config", "about", "out", "up", "deploy", "message", "user", "now", "time", "chat",
    "some", "agent", "model", "tool", "search", "run", "then", "file", "request", "memory", "could",
    "timeout", "retry", "build", "test", "release", "log", "queue", "worker", "token", "cache",
    "index", "query", "network", "disk", "latency", "thread", "process", "lock", "commit", "branch",
    "merge", "review", "bug", "fix", "issue", "update", "version", "restart", "daemon", "service",
    "container", "cluster", "node", "backup", "schema", "migration", "table", "path", "script",
    "shell", "router", "adapter", "platform", "deployed", "webhook", "prompt", "context", "history",
    "summary", "weather", "calendar", "meeting", "email", "invoice", "report", "deadline", "travel",
    "recipe", "music", "database", "deployment", "configure", "metrics", "alert", "dashboard",
    "upgrade", "rollback", "certificate", "proxy", "socket", "payload", "parser", "compiler",
    "kernel", "driver", "monitor", "storage", "bucket", "secret", "password", "account", "billing",
    "customer", "ticket", "sprint", "roadmap", "design", "feedback", "deploying", "conference",
    "migrate", "postgres", "kafka", "redis", "deadlock", "benchmark", "profile", "flaky",
    "regression", "patch", "vendor", "license", "holiday", "birthday", "dinner", "flight", "hotel",
    "garden", "coffee", "train",
];

/// Tokens with inner punctuation, which the search tokenizer splits and queries must survive.
#[rustfmt::skip]
const PUNCTUATED: &[&str] = &[
    "chat-send", "v2.1", "config.toml", "end-to-end", "api.example.com", "x86_64", "utf-8",
    "follow-up", "pre-commit", "v1.0.3", "read-only", "node.js", "e-mail", "re-run", "tls1.3",
];

/// Made-up words after the real ones: the long tail of rare terms.
const TAIL: usize = 40_000;

const CONSONANTS: &[u8] = b"bdfghjklmnprstvwz";
const VOWELS: &[u8] = b"aeiou";

/// A ranked vocabulary with a Zipf sampler.
#[derive(Debug)]
pub struct Vocabulary {
    words: Vec<String>,
    /// Running sum of the Zipf weights, for sampling by binary search.
    cumulative: Vec<f64>,
}

static GLOBAL: LazyLock<Vocabulary> = LazyLock::new(Vocabulary::build);

impl Vocabulary {
    /// The one vocabulary every scenario uses, built on first use.
    pub fn global() -> &'static Vocabulary {
        &GLOBAL
    }

    fn build() -> Vocabulary {
        let mut words: Vec<String> =
            COMMON.iter().chain(PUNCTUATED).map(|w| w.to_string()).collect();
        words.extend((0..TAIL).map(made_up));
        let mut total = 0.0;
        let cumulative = (1..=words.len())
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Vocabulary { words, cumulative }
    }

    /// The word of this rank (0 is the most frequent); ranks past the end wrap around.
    pub fn word(&self, rank: usize) -> &str {
        &self.words[rank % self.words.len()]
    }

    /// The rank of the first made-up word: from here on words are rare.
    pub fn tail_start(&self) -> usize {
        COMMON.len() + PUNCTUATED.len()
    }

    /// A word drawn with Zipf frequencies.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let target = rng.random::<f64>() * total;
        let rank = self.cumulative.partition_point(|&c| c < target);
        self.word(rank)
    }

    /// Sentences of sampled words, at least `bytes` long.
    pub fn text<R: Rng + ?Sized>(&self, rng: &mut R, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 16);
        let mut sentence = 0;
        while out.len() < bytes {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(self.sample(rng));
            sentence += 1;
            if sentence >= rng.random_range(6..16) {
                out.push('.');
                sentence = 0;
            }
        }
        out
    }
}

/// The made-up word number `n`: three syllables, distinct for distinct `n` because the
/// multiplier is coprime with the number of three-syllable words (17³·5³).
fn made_up(n: usize) -> String {
    let syllables = CONSONANTS.len() * VOWELS.len();
    let mut code = (n * 7919 + 13) % syllables.pow(3);
    let mut word = String::with_capacity(6);
    for _ in 0..3 {
        let s = code % syllables;
        code /= syllables;
        word.push(char::from(CONSONANTS[s / VOWELS.len()]));
        word.push(char::from(VOWELS[s % VOWELS.len()]));
    }
    word
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn words_are_distinct() {
        let vocab = Vocabulary::global();
        let distinct: HashSet<&str> = vocab.words.iter().map(String::as_str).collect();
        assert_eq!(distinct.len(), vocab.words.len());
    }

    #[test]
    fn frequent_words_are_frequent_and_the_tail_is_rare() {
        let vocab = Vocabulary::global();
        let mut rng = rand::rng();
        let draws = 100_000;
        let top = (0..draws).filter(|_| vocab.sample(&mut rng) == vocab.word(0)).count();
        let tail = (0..draws).filter(|_| vocab.sample(&mut rng) == vocab.word(30_000)).count();
        // Rank 0 has about 1/11 of the mass, rank 30 000 about 1/330 000.
        assert!(top > draws / 15, "the most frequent word came {top} times");
        assert!(tail < 10, "a tail word came {tail} times");
    }

    #[test]
    fn text_is_long_enough_and_varied() {
        let vocab = Vocabulary::global();
        let mut rng = rand::rng();
        let a = vocab.text(&mut rng, 200);
        let b = vocab.text(&mut rng, 200);
        assert!(a.len() >= 200 && a.len() < 260, "{} bytes", a.len());
        assert_ne!(a, b);
    }
}
