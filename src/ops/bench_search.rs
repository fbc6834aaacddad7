//! `custintel bench search`: the search index alone, with concurrent callers, on the text of
//! `bench tools`' book and on text with a natural vocabulary.
//!
//! `svc_search_customer_context` over a large organization spends nearly all of its time in
//! the index's best-`k` search; the rows of its ten hits and their passages are a small part.
//! This benchmark builds the index in memory from generated documents, with no database, so
//! the index can be measured at a million customers in a minute, and on two kinds of text:
//! - `template`: exactly the titles and bodies `bench tools` imports, where every source holds
//!   four of twelve words and names one of them in its title, so a query's words are in a
//!   third of all documents and tens of thousands of them tie for the best score;
//! - `natural`: a 5,000-word vocabulary with Zipf frequencies (the twelve query words among
//!   its most common), in titles and bodies of the same lengths, as real calls and emails
//!   have.
//!
//! Each text is searched by `--concurrency` callers for `--seconds` (admitted as the service
//! admits searches: at most one per core at once, in the order they came) with two random words of the
//! twelve, `topK` 10, over the large organization (small organizations hold a few
//! documents beside it, so the organization filter is checked as in a real index), and by one
//! caller for the CPU time of one search.

use std::time::{Duration, Instant};

use anyhow::Result;
use rand::{rngs::StdRng, Rng, SeedableRng};

use super::{
    bench::{fact_quote, fact_text, source_text, SOURCE_TYPES, WORDS},
    bench_ingest::{ms, percentile},
};
use crate::search::{ArtifactKind, IndexDoc, SearchFilter, SearchIndex};

/// The tool's target for a search over all customers.
const SEARCH_TARGET_MS: f64 = 50.0;
const LARGE_ORG: &str = "org_large";
const SMALL_ORGS: [&str; 3] = ["org_small_1", "org_small_2", "org_small_3"];
/// Documents of each small organization.
const SMALL_ORG_DOCUMENTS: usize = 2_000;
/// Words of the natural vocabulary, and the rank of the first query word in it.
const VOCABULARY: usize = 5_000;
const FIRST_QUERY_RANK: usize = 20;
/// Words in a source's body (as in the template).
const BODY_WORDS: usize = 40;
/// How long one caller searches, for the CPU time of one search.
const ONE_CALLER: Duration = Duration::from_secs(2);
const WARM_UP: Duration = Duration::from_secs(1);

/// Which text the documents hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SearchText {
    /// `bench tools`' book: twelve words in templates.
    Template,
    /// A 5,000-word vocabulary with Zipf frequencies.
    Natural,
    /// Both, one after the other.
    Both,
}

/// The index's size, the callers and the text.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchBenchArgs {
    /// Customers of the large organization; documents follow as in `bench tools` (2 sources
    /// and 0.4 active facts per customer: 2,400,000 documents at a million)
    #[arg(long, default_value_t = 1_000_000)]
    pub customers: usize,
    /// Concurrent callers
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Seconds the callers search each index (after a second's warm-up)
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// The documents' text
    #[arg(long, value_enum, default_value_t = SearchText::Both)]
    pub text: SearchText,
}

/// Words drawn with Zipf frequencies (the `r`th most common word weighs `1 / (r + 1)`).
struct Vocabulary {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocabulary {
    fn new() -> Self {
        let mut words: Vec<String> = (0..VOCABULARY).map(synthetic_word).collect();
        for (k, word) in WORDS.iter().enumerate() {
            words[FIRST_QUERY_RANK + k] = word.to_string();
        }
        let mut total = 0.0;
        let cumulative = (0..VOCABULARY)
            .map(|r| {
                total += 1.0 / (r as f64 + 1.0);
                total
            })
            .collect();
        Self { words, cumulative }
    }

    fn pick(&self, rng: &mut StdRng) -> &str {
        let x = rng.gen::<f64>() * self.cumulative[VOCABULARY - 1];
        let r = self.cumulative.partition_point(|c| *c < x);
        &self.words[r.min(VOCABULARY - 1)]
    }

    fn phrase(&self, rng: &mut StdRng, n: usize) -> String {
        (0..n).map(|_| self.pick(rng)).collect::<Vec<_>>().join(" ")
    }
}

/// A pronounceable word for rank `r`, distinct for every rank and left alone by the stemmer.
fn synthetic_word(r: usize) -> String {
    const CONSONANTS: &[u8] = b"bdfgklmnprstvz";
    const VOWELS: &[u8] = b"aiou";
    let mut word = String::new();
    let mut n = r + 1;
    while n > 0 {
        word.push(CONSONANTS[n % CONSONANTS.len()] as char);
        n /= CONSONANTS.len();
        word.push(VOWELS[n % VOWELS.len()] as char);
        n /= VOWELS.len();
    }
    word.push('k');
    word
}

/// The documents of one organization: `sources` sources and the active ones of
/// `sources / 4` facts, in the given text.
fn documents(
    organization: &str,
    sources: usize,
    text: SearchText,
    vocabulary: &Vocabulary,
    seed: u64,
) -> Vec<IndexDoc> {
    let mut rng = StdRng::seed_from_u64(seed);
    let customers = (sources / 2).max(1);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut docs = Vec::with_capacity(sources + sources / 4);
    for i in 0..sources {
        let source_type = SOURCE_TYPES[rng.gen_range(0..SOURCE_TYPES.len())];
        let (title, body) = match text {
            SearchText::Natural => (
                format!("{source_type} about {}", vocabulary.phrase(&mut rng, 2)),
                vocabulary.phrase(&mut rng, BODY_WORDS),
            ),
            _ => source_text(i, source_type),
        };
        let customer = format!("cus_{}", rng.gen_range(0..customers));
        let occurred_ms = now_ms - rng.gen_range(0..365 * 24 * 3_600_000i64);
        docs.push(IndexDoc::new(
            ArtifactKind::Source,
            &format!("{organization}_src_{i}"),
            organization,
            Some(&customer),
            source_type,
            occurred_ms,
            title,
            body,
        ));
    }
    // A fifth of the facts are superseded, and only active facts are searchable.
    for f in (0..sources / 4).filter(|f| f % 5 != 0) {
        let source_type = SOURCE_TYPES[rng.gen_range(0..SOURCE_TYPES.len())];
        let (statement, quote) = match text {
            SearchText::Natural => (
                format!("Cares about {} ({f})", vocabulary.pick(&mut rng)),
                vocabulary.pick(&mut rng).to_string(),
            ),
            _ => (fact_text(f), fact_quote(f).to_string()),
        };
        let customer = format!("cus_{}", rng.gen_range(0..customers));
        docs.push(IndexDoc::new(
            ArtifactKind::Fact,
            &format!("{organization}_fact_{f}"),
            organization,
            Some(&customer),
            source_type,
            now_ms - rng.gen_range(0..365 * 24 * 3_600_000i64),
            statement,
            quote,
        ));
    }
    docs
}

/// Latencies of searches by `callers` callers for `duration` (each from its call to its
/// answer, waiting for admission included), sorted. Searches go through the service's own
/// admission ([`SearchIndex::search_admitted`]).
async fn search_for(
    index: &SearchIndex,
    callers: usize,
    duration: Duration,
) -> Result<Vec<Duration>> {
    let deadline = Instant::now() + duration;
    let callers: Vec<_> = (0..callers)
        .map(|caller| {
            let index = index.clone();
            tokio::spawn(async move {
                let filter = SearchFilter {
                    organization_id: LARGE_ORG.to_string(),
                    ..SearchFilter::default()
                };
                let mut rng = StdRng::seed_from_u64(caller as u64);
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let query = format!(
                        "{} {}",
                        WORDS[rng.gen_range(0..WORDS.len())],
                        WORDS[rng.gen_range(0..WORDS.len())]
                    );
                    let started = Instant::now();
                    let hits = index
                        .search_admitted(query.clone(), filter.clone(), 10)
                        .await?;
                    latencies.push(started.elapsed());
                    anyhow::ensure!(!hits.is_empty(), "no hit for `{query}`");
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        })
        .collect();
    let mut all = Vec::new();
    for caller in callers {
        all.extend(caller.await??);
    }
    all.sort();
    Ok(all)
}

async fn measure(args: &SearchBenchArgs, text: SearchText, vocabulary: &Vocabulary) -> Result<()> {
    // The index is filled from the documents; it never reads its database.
    let index = SearchIndex::new(sea_orm::DatabaseConnection::default())?;
    let started = Instant::now();
    let mut docs = documents(LARGE_ORG, args.customers * 2, text, vocabulary, 42);
    for (k, organization) in SMALL_ORGS.iter().enumerate() {
        docs.extend(documents(
            organization,
            SMALL_ORG_DOCUMENTS,
            text,
            vocabulary,
            k as u64,
        ));
    }
    let count = docs.len();
    let built = {
        let index = index.clone();
        tokio::task::spawn_blocking(move || index.build_from_documents(docs)).await??;
        started.elapsed()
    };
    let mib = index.memory_bytes() as f64 / (1 << 20) as f64;
    let (callers, seconds) = (args.concurrency.max(1), args.seconds.max(1));
    search_for(&index, callers, WARM_UP).await?;
    let one = search_for(&index, 1, ONE_CALLER).await?;
    let many = search_for(&index, callers, Duration::from_secs(seconds)).await?;
    let p99 = ms(percentile(&many, 0.99));
    println!(
        "{:<9} {:>10} {:>8.1} {:>7.0} {:>10.2} {:>8} {:>8.2} {:>8.2} {:>12.2}",
        format!("{text:?}").to_lowercase(),
        count,
        built.as_secs_f64(),
        mib,
        ms(percentile(&one, 0.5)),
        many.len(),
        ms(percentile(&many, 0.5)),
        p99,
        p99 / SEARCH_TARGET_MS,
    );
    Ok(())
}

pub async fn run(args: SearchBenchArgs) -> Result<()> {
    println!(
        "custintel bench search: the search index alone (in memory, no database), {} customers' \
         documents in one organization, {} callers for {} s, two random words of twelve, topK 10",
        args.customers, args.concurrency, args.seconds
    );
    println!(
        "{:<9} {:>10} {:>8} {:>7} {:>10} {:>8} {:>8} {:>8} {:>12}",
        "text",
        "documents",
        "build s",
        "MiB",
        "1 caller",
        "calls",
        "p50 ms",
        "p99 ms",
        "p99 / 50 ms"
    );
    let vocabulary = Vocabulary::new();
    let texts = match args.text {
        SearchText::Both => vec![SearchText::Template, SearchText::Natural],
        one => vec![one],
    };
    for text in texts {
        measure(&args, text, &vocabulary).await?;
    }
    println!(
        "(`1 caller`: p50 ms of one caller alone, the CPU time of one search; the tool adds the \
         hits' rows and passages, and its target is for the whole call)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_natural_vocabulary_has_distinct_words_that_the_index_keeps_apart() {
        let index = SearchIndex::new(sea_orm::DatabaseConnection::default()).expect("index");
        let vocabulary = Vocabulary::new();
        let analysed: HashSet<Vec<String>> =
            vocabulary.words.iter().map(|w| index.analyze(w)).collect();
        assert_eq!(analysed.len(), VOCABULARY);
        assert!(analysed.iter().all(|words| words.len() == 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_texts_build_an_index_that_finds_every_query_word() {
        let vocabulary = Vocabulary::new();
        for text in [SearchText::Template, SearchText::Natural] {
            let index = SearchIndex::new(sea_orm::DatabaseConnection::default()).expect("index");
            let mut docs = documents(LARGE_ORG, 4_000, text, &vocabulary, 1);
            docs.extend(documents(SMALL_ORGS[0], 400, text, &vocabulary, 2));
            assert!(!index.is_built());
            index.build_from_documents(docs).expect("build");
            assert!(index.is_built());
            let filter = SearchFilter {
                organization_id: LARGE_ORG.to_string(),
                ..SearchFilter::default()
            };
            for word in WORDS {
                let hits = index.search(word, &filter, 10).expect("search");
                assert_eq!(hits.len(), 10, "{text:?}: `{word}`");
                assert!(hits.iter().all(|h| h.id.starts_with(LARGE_ORG)), "{text:?}");
            }
            let latencies = search_for(&index, 3, Duration::from_millis(50))
                .await
                .expect("callers");
            assert!(!latencies.is_empty());
            assert!(latencies.windows(2).all(|w| w[0] <= w[1]));
        }
    }
}
