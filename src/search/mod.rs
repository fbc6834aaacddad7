//! Full-text search over sources and facts: a local tantivy (BM25) index that is a replica of
//! the database. It is built from the `sources` and `facts` tables at start, then kept current
//! by following `change_log` (every source or fact write appends a row with an increasing
//! `seq`), so a write through any instance becomes searchable through every instance within
//! a poll interval, and a restarted instance rebuilds the same index from the database.

mod filtered_top;
mod passages;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    ops::Bound,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use entity::{
    change,
    fact::{self, FactStatus},
    source,
};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use tantivy::{
    collector::TopDocs,
    merge_policy::{LogMergePolicy, NoMergePolicy},
    query::{BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery},
    schema::{
        Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, FAST, INDEXED,
        STORED, STRING,
    },
    tokenizer::TextAnalyzer,
    Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term,
};

pub use passages::best_passages;

/// Rows read from the database per round trip while building or following.
const PAGE: u64 = 2000;
/// How often the follower looks for new changes.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// A sequence number skipped by the follower may belong to a transaction that commits late
/// (PostgreSQL hands out sequence values before commit); it is looked for again this long.
const GAP_PATIENCE: Duration = Duration::from_secs(60);
/// Gaps remembered at most (a rolled-back bulk write must not grow this without bound).
const MAX_GAPS: usize = 10_000;
/// Only facts in this status are searchable: superseded and retracted facts are not current
/// knowledge about a customer.
const SEARCHABLE_FACT_STATUS: FactStatus = FactStatus::Active;
/// The field holding when an artifact occurred (Unix milliseconds).
const OCCURRED_MS: &str = "occurred_ms";
/// Title matches weigh more than body matches.
const TITLE_BOOST: f32 = 2.0;

/// The kind of artifact a search hit refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArtifactKind {
    Source,
    Fact,
}

impl ArtifactKind {
    fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Source => "source",
            ArtifactKind::Fact => "fact",
        }
    }

    fn parse(raw: &str) -> Option<Self> {
        match raw {
            "source" => Some(ArtifactKind::Source),
            "fact" => Some(ArtifactKind::Fact),
            _ => None,
        }
    }
}

/// Restrictions every search applies; `organization_id` is always required.
#[derive(Clone, Debug, Default)]
pub struct SearchFilter {
    pub organization_id: String,
    pub customer_id: Option<String>,
    /// Canonical source types; empty means every type.
    pub source_types: Vec<String>,
    /// Only artifacts that occurred at or after this instant (Unix milliseconds).
    pub after_ms: Option<i64>,
}

/// One matching artifact: its kind, its database id and its BM25 score.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub kind: ArtifactKind,
    pub id: String,
    pub score: f32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Progress {
    /// The initial build from the tables has finished.
    built: bool,
    /// Every change up to this sequence number is applied (gaps aside).
    seq: i64,
}

struct Fields {
    /// `source:<db id>` or `fact:<db id>`: the unit of replacement.
    key: Field,
    organization: Field,
    customer: Field,
    source_type: Field,
    occurred_ms: Field,
    title: Field,
    body: Field,
}

#[derive(Default)]
struct FollowState {
    last_seq: i64,
    /// Skipped sequence numbers and when they were first noticed.
    gaps: BTreeMap<i64, Instant>,
}

struct Inner {
    db: DatabaseConnection,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
    analyzer: TextAnalyzer,
    follow: tokio::sync::Mutex<FollowState>,
    progress: tokio::sync::watch::Sender<Progress>,
    /// Searches that may run at once: one per core ([`SearchIndex::search_admitted`]).
    searching: Arc<tokio::sync::Semaphore>,
}

/// A handle to the search index, cheap to clone; every clone shares one index.
#[derive(Clone)]
pub struct SearchIndex {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("progress", &*self.inner.progress.borrow())
            .finish()
    }
}

impl SearchIndex {
    /// An empty index over `db` that nothing fills until [`SearchIndex::start`] or
    /// [`SearchIndex::catch_up`] runs (the OpenAPI description is built with one).
    pub fn new(db: DatabaseConnection) -> anyhow::Result<Self> {
        let mut builder = Schema::builder();
        // Term frequencies for BM25, no positions: no query reads them (there are no phrase
        // queries), and they would add to the index's memory and to every merge.
        let text = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("en_stem")
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        let fields = Fields {
            key: builder.add_text_field("key", STRING | STORED),
            organization: builder.add_text_field("organization", STRING),
            customer: builder.add_text_field("customer", STRING),
            source_type: builder.add_text_field("source_type", STRING),
            occurred_ms: builder.add_i64_field(OCCURRED_MS, INDEXED | FAST),
            title: builder.add_text_field("title", text.clone()),
            body: builder.add_text_field("body", text),
        };
        let index = Index::create_in_ram(builder.build());
        let analyzer = index.tokenizer_for_field(fields.body)?;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 4);
        let writer = index.writer_with_num_threads(threads, threads * 40_000_000)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let (progress, _) = tokio::sync::watch::channel(Progress::default());
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                reader,
                writer: Mutex::new(writer),
                fields,
                analyzer,
                follow: tokio::sync::Mutex::new(FollowState::default()),
                progress,
                searching: Arc::new(tokio::sync::Semaphore::new(
                    std::thread::available_parallelism().map_or(1, |n| n.get()),
                )),
            }),
        })
    }

    /// An index over `db` that builds itself in the background and then follows the change
    /// log until the last handle is dropped. Needs a tokio runtime.
    pub fn start(db: DatabaseConnection) -> anyhow::Result<Self> {
        let index = Self::new(db)?;
        tokio::spawn(follow(Arc::downgrade(&index.inner)));
        Ok(index)
    }

    /// Whether the initial build from the database has finished.
    pub fn is_built(&self) -> bool {
        self.inner.progress.borrow().built
    }

    /// Waits until the index has applied every change written before this call (the largest
    /// `change_log.seq` now), or fails after `timeout`.
    pub async fn wait_caught_up(&self, timeout: Duration) -> anyhow::Result<()> {
        let target = max_seq(&self.inner.db).await?;
        let mut rx = self.inner.progress.subscribe();
        let reached = tokio::time::timeout(timeout, async {
            loop {
                let p = *rx.borrow_and_update();
                if p.built && p.seq >= target {
                    return Ok::<_, anyhow::Error>(());
                }
                rx.changed().await?;
            }
        })
        .await;
        match reached {
            Ok(result) => result,
            Err(_) => anyhow::bail!(
                "the search index did not reach change {target} within {timeout:?} (at {:?})",
                *self.inner.progress.borrow()
            ),
        }
    }

    /// Waits for the initial build, at most `timeout`; searching before it ends would miss
    /// artifacts, so the search tool waits here first.
    pub async fn wait_built(&self, timeout: Duration) -> bool {
        let mut rx = self.inner.progress.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|p| p.built))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Builds the index from the tables when that has not happened yet, then applies every
    /// pending change. The background follower calls this; so may benchmarks and tools that
    /// want a fresh answer now.
    pub async fn catch_up(&self) -> anyhow::Result<()> {
        self.inner.catch_up().await
    }

    /// Indexes `docs` as the initial build would, without reading the database, and reports
    /// the index built: for measuring the index alone (`bench search`). Blocking.
    pub(crate) fn build_from_documents(
        &self,
        docs: impl IntoIterator<Item = IndexDoc>,
    ) -> anyhow::Result<()> {
        let inner = &self.inner;
        inner.begin_build()?;
        let mut docs = docs.into_iter().peekable();
        while docs.peek().is_some() {
            let chunk: Vec<IndexDoc> = docs.by_ref().take(PAGE as usize).collect();
            inner.replace(&[], &chunk, false)?;
        }
        inner.finish_build()?;
        inner.progress.send_modify(|p| p.built = true);
        Ok(())
    }

    /// Bytes the index's segments hold (the index lives in memory).
    pub fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    /// Query words as the index analyses them (lower-cased, stemmed), without repeats.
    pub fn analyze(&self, text: &str) -> Vec<String> {
        analyze(&self.inner.analyzer, text)
    }

    /// The best `limit` artifacts for `text` within `filter`, best first. Runs on the
    /// caller's thread (a search takes milliseconds).
    pub fn search(
        &self,
        text: &str,
        filter: &SearchFilter,
        limit: usize,
    ) -> anyhow::Result<Vec<Hit>> {
        self.search_with(text, filter, limit, None)
    }

    /// [`SearchIndex::search`] off the request threads: on a blocking thread, at most one
    /// search per core at a time, callers admitted in the order they came. A search over a
    /// large organization's common words takes tens of milliseconds of CPU; on one of the
    /// request runtime's few threads it would hold every other request waiting there (ingest's
    /// acknowledgements among them) for that long, and more searches at once than cores would
    /// only share the cores and all finish later.
    pub async fn search_admitted(
        &self,
        text: String,
        filter: SearchFilter,
        limit: usize,
    ) -> anyhow::Result<Vec<Hit>> {
        let admitted = self.inner.searching.clone().acquire_owned().await?;
        let index = self.clone();
        tokio::task::spawn_blocking(move || {
            let _admitted = admitted;
            index.search(&text, &filter, limit)
        })
        .await?
    }

    /// [`SearchIndex::search`], by the given strategy or else the cheaper one.
    fn search_with(
        &self,
        text: &str,
        filter: &SearchFilter,
        limit: usize,
        strategy: Option<Strategy>,
    ) -> anyhow::Result<Vec<Hit>> {
        let inner = &self.inner;
        let f = &inner.fields;
        let words = self.analyze(text);
        if words.is_empty() || limit == 0 {
            return Ok(vec![]);
        }
        let mut text_clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for word in &words {
            let title = TermQuery::new(
                Term::from_field_text(f.title, word),
                IndexRecordOption::WithFreqs,
            );
            text_clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(Box::new(title), TITLE_BOOST)),
            ));
            text_clauses.push((
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.body, word),
                    IndexRecordOption::WithFreqs,
                )),
            ));
        }
        let words = BooleanQuery::new(text_clauses);
        let searcher = inner.reader.searcher();
        let strategy = match strategy {
            Some(s) => s,
            None => self.strategy(&searcher, filter)?,
        };
        let top = match strategy {
            Strategy::Intersect => {
                let query = self.filtered(words, filter);
                searcher.search(&query, &TopDocs::with_limit(limit).order_by_score())?
            }
            Strategy::PruneThenCheck => {
                filtered_top::top_docs(&searcher, &words, &self.term_filter(filter), limit)?
            }
        };
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let Some(key) = doc.get_first(f.key).and_then(|v| v.as_str()) else {
                continue;
            };
            if let Some((kind, id)) = key
                .split_once(':')
                .and_then(|(k, id)| ArtifactKind::parse(k).map(|k| (k, id.to_string())))
            {
                hits.push(Hit { kind, id, score });
            }
        }
        Ok(hits)
    }
}

/// How a search finds its best documents (both give the same answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    /// Score every document that has a query word and passes the filter: cheap when the
    /// filter lets few documents through.
    Intersect,
    /// Score the words alone, skipping what cannot reach the best `k`, and check the filter
    /// on what is left (`filtered_top`): cheap when most documents pass the filter.
    PruneThenCheck,
}

impl SearchIndex {
    /// Prunes first when no customer is named and the organization holds at least half of
    /// the index (one large organization beside small ones).
    fn strategy(&self, searcher: &Searcher, filter: &SearchFilter) -> anyhow::Result<Strategy> {
        if filter.customer_id.is_some() {
            return Ok(Strategy::Intersect);
        }
        let organization =
            Term::from_field_text(self.inner.fields.organization, &filter.organization_id);
        let share = searcher.doc_freq(&organization)?;
        Ok(if share.saturating_mul(2) >= searcher.num_docs() {
            Strategy::PruneThenCheck
        } else {
            Strategy::Intersect
        })
    }

    /// The words intersected with the filter; filters match or not and add nothing to the
    /// score.
    fn filtered(&self, words: BooleanQuery, filter: &SearchFilter) -> BooleanQuery {
        let f = &self.inner.fields;
        let exact = |field: Field, value: &str| -> Box<dyn Query> {
            Box::new(ConstScoreQuery::new(
                Box::new(TermQuery::new(
                    Term::from_field_text(field, value),
                    IndexRecordOption::Basic,
                )),
                0.0,
            ))
        };
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![
            (Occur::Must, Box::new(words)),
            (Occur::Must, exact(f.organization, &filter.organization_id)),
        ];
        if let Some(customer) = &filter.customer_id {
            clauses.push((Occur::Must, exact(f.customer, customer)));
        }
        if !filter.source_types.is_empty() {
            let any_type = filter
                .source_types
                .iter()
                .map(|t| (Occur::Should, exact(f.source_type, t)))
                .collect();
            clauses.push((Occur::Must, Box::new(BooleanQuery::new(any_type))));
        }
        if let Some(after) = filter.after_ms {
            clauses.push((
                Occur::Must,
                Box::new(ConstScoreQuery::new(
                    Box::new(RangeQuery::new(
                        Bound::Included(Term::from_field_i64(f.occurred_ms, after)),
                        Bound::Unbounded,
                    )),
                    0.0,
                )),
            ));
        }
        BooleanQuery::new(clauses)
    }

    /// The filter as terms to check document by document.
    fn term_filter(&self, filter: &SearchFilter) -> filtered_top::TermFilter<'static> {
        let f = &self.inner.fields;
        let mut required = vec![Term::from_field_text(
            f.organization,
            &filter.organization_id,
        )];
        if let Some(customer) = &filter.customer_id {
            required.push(Term::from_field_text(f.customer, customer));
        }
        filtered_top::TermFilter {
            required,
            any_of: filter
                .source_types
                .iter()
                .map(|t| Term::from_field_text(f.source_type, t))
                .collect(),
            at_least: filter.after_ms.map(|after| (OCCURRED_MS, after)),
        }
    }
}

fn analyze(analyzer: &TextAnalyzer, text: &str) -> Vec<String> {
    let mut analyzer = analyzer.clone();
    let mut stream = analyzer.token_stream(text);
    let mut seen = HashSet::new();
    let mut words = Vec::new();
    while stream.advance() {
        let word = stream.token().text.clone();
        if seen.insert(word.clone()) {
            words.push(word);
        }
    }
    words
}

/// The background loop: build, then follow, until the index is dropped.
async fn follow(index: Weak<Inner>) {
    loop {
        let Some(inner) = index.upgrade() else {
            return;
        };
        if let Err(err) = inner.catch_up().await {
            tracing::warn!(error = %err, "search index could not follow the database");
        }
        drop(inner);
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

async fn max_seq(db: &DatabaseConnection) -> anyhow::Result<i64> {
    let last = change::Entity::find()
        .order_by_desc(change::Column::Seq)
        .limit(1)
        .one(db)
        .await?;
    Ok(last.map(|c| c.seq).unwrap_or(0))
}

/// An artifact as the index stores it.
pub(crate) struct IndexDoc {
    key: String,
    organization_id: String,
    customer_id: Option<String>,
    source_type: String,
    occurred_ms: i64,
    title: String,
    body: String,
}

impl IndexDoc {
    /// An artifact's document from its parts (`bench search` indexes generated text this way).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        kind: ArtifactKind,
        id: &str,
        organization_id: &str,
        customer_id: Option<&str>,
        source_type: &str,
        occurred_ms: i64,
        title: String,
        body: String,
    ) -> Self {
        IndexDoc {
            key: artifact_key(kind, id),
            organization_id: organization_id.to_string(),
            customer_id: customer_id.map(str::to_string),
            source_type: source_type.to_string(),
            occurred_ms,
            title,
            body,
        }
    }
}

impl From<&source::Model> for IndexDoc {
    fn from(s: &source::Model) -> Self {
        IndexDoc {
            key: artifact_key(ArtifactKind::Source, &s.id),
            organization_id: s.organization_id.clone(),
            customer_id: s.customer_id.clone(),
            source_type: s.source_type.clone(),
            occurred_ms: s.occurred_at.timestamp_millis(),
            title: s.title.clone(),
            body: s.body.clone(),
        }
    }
}

impl From<&fact::Model> for IndexDoc {
    fn from(f: &fact::Model) -> Self {
        IndexDoc {
            key: artifact_key(ArtifactKind::Fact, &f.id),
            organization_id: f.organization_id.clone(),
            customer_id: Some(f.customer_id.clone()),
            source_type: f.source_type.clone(),
            occurred_ms: f.source_occurred_at.timestamp_millis(),
            // The fact's statement is its title; the quote it rests on is its body.
            title: f.text.clone(),
            body: f.source_quote.clone(),
        }
    }
}

fn artifact_key(kind: ArtifactKind, id: &str) -> String {
    format!("{}:{id}", kind.as_str())
}

impl Inner {
    fn memory_bytes(&self) -> u64 {
        self.reader
            .searcher()
            .space_usage()
            .map_or(0, |usage| usage.total().get_bytes())
    }

    fn document(&self, d: &IndexDoc) -> TantivyDocument {
        let f = &self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_text(f.key, &d.key);
        doc.add_text(f.organization, &d.organization_id);
        if let Some(c) = &d.customer_id {
            doc.add_text(f.customer, c);
        }
        doc.add_text(f.source_type, &d.source_type);
        doc.add_i64(f.occurred_ms, d.occurred_ms);
        doc.add_text(f.title, &d.title);
        doc.add_text(f.body, &d.body);
        doc
    }

    /// Replaces the given artifacts in the index: each key is deleted, then the documents
    /// present are added (an artifact gone from the database stays deleted). Blocking.
    fn replace(&self, keys: &[String], docs: &[IndexDoc], commit: bool) -> anyhow::Result<()> {
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| anyhow::anyhow!("search index writer poisoned"))?;
        for key in keys {
            writer.delete_term(Term::from_field_text(self.fields.key, key));
        }
        for d in docs {
            writer.add_document(self.document(d))?;
        }
        if commit {
            writer.commit()?;
            self.reader.reload()?;
        }
        Ok(())
    }

    /// Empties the index for a build, and holds merges until its end (see `finish_build`).
    /// Blocking.
    fn begin_build(&self) -> anyhow::Result<()> {
        let writer = self
            .writer
            .lock()
            .map_err(|_| anyhow::anyhow!("search index writer poisoned"))?;
        writer.delete_all_documents()?;
        writer.set_merge_policy(Box::new(NoMergePolicy));
        Ok(())
    }

    /// Commits the build, then merges its segments into one and restores the usual merge
    /// policy, before the index is reported built. Left to the background, merging a million
    /// customers' segments took most of a core for a minute after the build, and tool calls
    /// waited on it; one segment is also what a search reads fastest. Blocking.
    fn finish_build(&self) -> anyhow::Result<()> {
        self.replace(&[], &[], true)?;
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| anyhow::anyhow!("search index writer poisoned"))?;
        let segments = self.reader.searcher().index().searchable_segment_ids()?;
        if segments.len() > 1 {
            writer.merge(&segments).wait()?;
        }
        writer.set_merge_policy(Box::new(LogMergePolicy::default()));
        drop(writer);
        self.reader.reload()?;
        Ok(())
    }

    async fn catch_up(self: &Arc<Self>) -> anyhow::Result<()> {
        let mut state = self.follow.lock().await;
        if !self.progress.borrow().built {
            self.build(&mut state).await?;
        }
        loop {
            let applied = self.apply_changes(&mut state).await?;
            if applied < PAGE as usize {
                return Ok(());
            }
        }
    }

    /// Indexes every source and fact, after noting the change sequence reached so far;
    /// changes written during the build are applied again afterwards (replacement keeps
    /// that idempotent).
    async fn build(self: &Arc<Self>, state: &mut FollowState) -> anyhow::Result<()> {
        let started = Instant::now();
        let start_seq = max_seq(&self.db).await?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.begin_build()).await??;
        let mut count = 0usize;
        let mut after = String::new();
        loop {
            let rows = source::Entity::find()
                .filter(source::Column::Id.gt(after.clone()))
                .order_by_asc(source::Column::Id)
                .limit(PAGE)
                .all(&self.db)
                .await?;
            let Some(last) = rows.last() else { break };
            after = last.id.clone();
            count += rows.len();
            let docs: Vec<IndexDoc> = rows.iter().map(IndexDoc::from).collect();
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.replace(&[], &docs, false)).await??;
        }
        let mut after = String::new();
        loop {
            let rows = fact::Entity::find()
                .filter(fact::Column::Id.gt(after.clone()))
                .order_by_asc(fact::Column::Id)
                .limit(PAGE)
                .all(&self.db)
                .await?;
            let Some(last) = rows.last() else { break };
            after = last.id.clone();
            let docs: Vec<IndexDoc> = rows
                .iter()
                .filter(|f| f.status == SEARCHABLE_FACT_STATUS)
                .map(IndexDoc::from)
                .collect();
            count += docs.len();
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.replace(&[], &docs, false)).await??;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.finish_build()).await??;
        state.last_seq = start_seq;
        state.gaps.clear();
        self.progress.send_replace(Progress {
            built: true,
            seq: start_seq,
        });
        tracing::info!(
            artifacts = count,
            elapsed_ms = started.elapsed().as_millis() as u64,
            index_bytes = self.memory_bytes(),
            "search index built"
        );
        Ok(())
    }

    /// Applies one page of changes after `state.last_seq` (and any late gap); returns how
    /// many new changes it read.
    async fn apply_changes(self: &Arc<Self>, state: &mut FollowState) -> anyhow::Result<usize> {
        let now = Instant::now();
        state
            .gaps
            .retain(|_, noticed| now.duration_since(*noticed) < GAP_PATIENCE);
        let mut rows = change::Entity::find()
            .filter(change::Column::Seq.gt(state.last_seq))
            .order_by_asc(change::Column::Seq)
            .limit(PAGE)
            .all(&self.db)
            .await?;
        let new_count = rows.len();
        if !state.gaps.is_empty() {
            let gap_seqs: Vec<i64> = state.gaps.keys().copied().take(1000).collect();
            let late = change::Entity::find()
                .filter(change::Column::Seq.is_in(gap_seqs))
                .all(&self.db)
                .await?;
            for row in &late {
                state.gaps.remove(&row.seq);
            }
            rows.extend(late);
        }
        if rows.is_empty() {
            return Ok(0);
        }
        let mut expected = state.last_seq + 1;
        let mut last_seq = state.last_seq;
        for row in rows.iter().take(new_count) {
            let mut missing = expected;
            while missing < row.seq && state.gaps.len() < MAX_GAPS {
                state.gaps.insert(missing, now);
                missing += 1;
            }
            expected = row.seq + 1;
            last_seq = last_seq.max(row.seq);
        }

        let mut source_ids = HashSet::new();
        let mut fact_ids = HashSet::new();
        for row in &rows {
            match ArtifactKind::parse(&row.artifact_type) {
                Some(ArtifactKind::Source) => {
                    source_ids.insert(row.artifact_id.clone());
                }
                Some(ArtifactKind::Fact) => {
                    fact_ids.insert(row.artifact_id.clone());
                }
                None => {}
            }
        }
        let mut keys: Vec<String> = Vec::new();
        let mut docs: Vec<IndexDoc> = Vec::new();
        if !source_ids.is_empty() {
            keys.extend(
                source_ids
                    .iter()
                    .map(|id| artifact_key(ArtifactKind::Source, id)),
            );
            let found = source::Entity::find()
                .filter(source::Column::Id.is_in(source_ids))
                .all(&self.db)
                .await?;
            docs.extend(found.iter().map(IndexDoc::from));
        }
        if !fact_ids.is_empty() {
            keys.extend(
                fact_ids
                    .iter()
                    .map(|id| artifact_key(ArtifactKind::Fact, id)),
            );
            let found = fact::Entity::find()
                .filter(fact::Column::Id.is_in(fact_ids))
                .all(&self.db)
                .await?;
            docs.extend(
                found
                    .iter()
                    .filter(|f| f.status == SEARCHABLE_FACT_STATUS)
                    .map(IndexDoc::from),
            );
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.replace(&keys, &docs, true)).await??;
        state.last_seq = last_seq;
        self.progress.send_replace(Progress {
            built: true,
            seq: last_seq,
        });
        Ok(new_count)
    }
}

/// Scores that compare across calls: BM25 scores rounded to 4 decimals.
pub fn round_score(score: f32) -> f64 {
    (f64::from(score) * 10_000.0).round() / 10_000.0
}

/// Loads the rows behind `hits`, keeping the hits' order and dropping any that vanished from
/// the database (or moved to another organization) since they were indexed.
pub async fn load_hits<C: sea_orm::ConnectionTrait>(
    db: &C,
    organization_id: &str,
    hits: &[Hit],
) -> Result<Vec<(Hit, Artifact)>, sea_orm::DbErr> {
    let source_ids: Vec<&str> = hits
        .iter()
        .filter(|h| h.kind == ArtifactKind::Source)
        .map(|h| h.id.as_str())
        .collect();
    let fact_ids: Vec<&str> = hits
        .iter()
        .filter(|h| h.kind == ArtifactKind::Fact)
        .map(|h| h.id.as_str())
        .collect();
    let mut sources: HashMap<String, source::Model> = HashMap::new();
    if !source_ids.is_empty() {
        for s in crate::db::find_by_ids_in_organization::<source::Entity, _, _>(
            db,
            source::Column::Id,
            source_ids,
            organization_id,
            |s| &s.organization_id,
        )
        .await?
        {
            sources.insert(s.id.clone(), s);
        }
    }
    let mut facts: HashMap<String, fact::Model> = HashMap::new();
    if !fact_ids.is_empty() {
        for f in crate::db::find_by_ids_in_organization::<fact::Entity, _, _>(
            db,
            fact::Column::Id,
            fact_ids,
            organization_id,
            |f| &f.organization_id,
        )
        .await?
        {
            facts.insert(f.id.clone(), f);
        }
    }
    Ok(hits
        .iter()
        .filter_map(|h| {
            let artifact = match h.kind {
                ArtifactKind::Source => sources.remove(&h.id).map(Artifact::Source),
                ArtifactKind::Fact => facts.remove(&h.id).map(Artifact::Fact),
            }?;
            Some((h.clone(), artifact))
        })
        .collect())
}

/// A search hit's database row.
pub enum Artifact {
    Source(source::Model),
    Fact(fact::Model),
}

/// Appends a `change_log` row and returns its sequence number for the source or fact's
/// `change_seq`, so the search index following the change feed sees every write.
pub async fn record_change(
    txn: &sea_orm::DatabaseTransaction,
    org: &str,
    artifact_type: &str,
    artifact_id: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<i64, sea_orm::DbErr> {
    use sea_orm::{ActiveModelTrait, NotSet, Set};
    let row = change::ActiveModel {
        seq: NotSet,
        organization_id: Set(org.to_string()),
        artifact_type: Set(artifact_type.to_string()),
        artifact_id: Set(artifact_id.to_string()),
        created_at: Set(at),
    }
    .insert(txn)
    .await?;
    Ok(row.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Documents of a large organization and a small one, with repeated texts (equal scores),
    /// several segments, deletions, every source type and a spread of dates.
    fn index_with_two_organizations() -> SearchIndex {
        let db = sea_orm::DatabaseConnection::default();
        let index = SearchIndex::new(db).expect("index");
        let words = [
            "renewal", "pricing", "outage", "seats", "contract", "budget",
        ];
        let types = ["CALL", "EMAIL", "SUPPORT_TICKET", "OPPORTUNITY"];
        for segment in 0..4 {
            let docs: Vec<IndexDoc> = (0..600)
                .map(|i| {
                    let n = segment * 600 + i;
                    let organization = if n % 10 == 0 { "small" } else { "large" };
                    let pick = |k: usize| words[(n * k + segment) % words.len()];
                    IndexDoc {
                        key: artifact_key(ArtifactKind::Source, &format!("s{n}")),
                        organization_id: organization.into(),
                        customer_id: Some(format!("c{}", n % 7)),
                        source_type: types[n % types.len()].into(),
                        occurred_ms: (n as i64 % 50) * 1_000,
                        title: format!("{} {}", pick(1), pick(3)),
                        body: format!("{} {} {} notes", pick(5), pick(7), pick(2))
                            .repeat(1 + n % 3),
                    }
                })
                .collect();
            index.inner.replace(&[], &docs, true).expect("add");
        }
        let gone: Vec<String> = (0..2400)
            .step_by(13)
            .map(|n| artifact_key(ArtifactKind::Source, &format!("s{n}")))
            .collect();
        index.inner.replace(&gone, &[], true).expect("delete");
        index
    }

    /// The same hits but for float rounding: the two ways add a document's term scores in
    /// different orders, so equal scores may differ in the last bits, and documents whose
    /// scores tie may come in another order, or trade places at the end of the list.
    fn same_hits(a: &[Hit], b: &[Hit], case: &str) {
        let close = |x: f32, y: f32| (x - y).abs() <= 1e-4 * x.abs().max(1.0);
        assert_eq!(a.len(), b.len(), "{case}: hit counts");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                close(x.score, y.score),
                "{case}: score {i}: {x:?} against {y:?}"
            );
        }
        let Some(last) = a.last().map(|h| h.score) else {
            return;
        };
        let clear = |hits: &[Hit]| -> std::collections::BTreeSet<String> {
            hits.iter()
                .filter(|h| !close(h.score, last))
                .map(|h| h.id.clone())
                .collect()
        };
        assert_eq!(clear(a), clear(b), "{case}: hits above the last score");
    }

    #[test]
    fn pruning_then_checking_finds_what_intersecting_finds() {
        let index = index_with_two_organizations();
        let filters = [
            SearchFilter {
                organization_id: "large".into(),
                ..Default::default()
            },
            SearchFilter {
                organization_id: "small".into(),
                ..Default::default()
            },
            SearchFilter {
                organization_id: "nobody".into(),
                ..Default::default()
            },
            SearchFilter {
                organization_id: "large".into(),
                source_types: vec!["EMAIL".into(), "OPPORTUNITY".into()],
                ..Default::default()
            },
            SearchFilter {
                organization_id: "large".into(),
                after_ms: Some(30_000),
                customer_id: Some("c3".into()),
                ..Default::default()
            },
            SearchFilter {
                organization_id: "large".into(),
                source_types: vec!["CALENDAR_EVENT".into()],
                ..Default::default()
            },
        ];
        let mut compared = 0;
        for filter in &filters {
            for text in [
                "renewal",
                "pricing outage",
                "seats budget contract",
                "notes",
            ] {
                for limit in [1, 10, 50, 5000] {
                    let intersect = index
                        .search_with(text, filter, limit, Some(Strategy::Intersect))
                        .expect("intersect");
                    let pruned = index
                        .search_with(text, filter, limit, Some(Strategy::PruneThenCheck))
                        .expect("prune");
                    same_hits(&intersect, &pruned, &format!("{text:?} {filter:?} {limit}"));
                    compared += intersect.len();
                }
            }
        }
        assert!(
            compared > 10_000,
            "the filters found too little to compare: {compared}"
        );
    }

    #[test]
    fn the_large_organization_prunes_and_the_small_one_intersects() {
        let index = index_with_two_organizations();
        let searcher = index.inner.reader.searcher();
        let of = |organization: &str, customer: Option<&str>| SearchFilter {
            organization_id: organization.into(),
            customer_id: customer.map(Into::into),
            ..Default::default()
        };
        let strategy = |f: SearchFilter| index.strategy(&searcher, &f).expect("strategy");
        assert_eq!(strategy(of("large", None)), Strategy::PruneThenCheck);
        assert_eq!(strategy(of("small", None)), Strategy::Intersect);
        assert_eq!(strategy(of("large", Some("c1"))), Strategy::Intersect);
    }
}
