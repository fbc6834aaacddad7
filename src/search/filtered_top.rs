//! The best `k` documents for the query words among those a filter lets through, for a filter
//! that most documents pass (the organization holding most of the index, with no customer
//! named).
//!
//! Intersecting the words with such a filter scores every document that has any of the words:
//! at a million customers, millions of documents for common words. Here the words alone are
//! scored with block-max WAND, which skips blocks of documents that cannot reach the current
//! k-th best score, and each document it does offer is checked against the filter (postings
//! read forward, since documents come in increasing order) before it may enter the best `k`.
//! The result is the same as the intersection's: same documents, same scores, same order.

use std::{cmp::Ordering, collections::BinaryHeap};

use tantivy::{
    columnar::Column,
    postings::SegmentPostings,
    query::{EnableScoring, Query},
    schema::IndexRecordOption,
    DocAddress, DocId, DocSet, Score, Searcher, SegmentReader, Term, TERMINATED,
};

/// What a document must match: every required term, one of the `any_of` terms when there are
/// some, and a value of `at_least.0` at or above `at_least.1`.
pub(super) struct TermFilter<'a> {
    pub required: Vec<Term>,
    pub any_of: Vec<Term>,
    pub at_least: Option<(&'a str, i64)>,
}

/// A candidate in the best `k`; the greater entry is the better one: a higher score, then the
/// earlier document (as tantivy's `TopDocs` breaks ties).
#[derive(Clone, Copy, PartialEq)]
struct Entry {
    score: Score,
    address: DocAddress,
}

impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.address.cmp(&self.address))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The best `limit` documents for `words` that pass `filter`, best first.
pub(super) fn top_docs(
    searcher: &Searcher,
    words: &dyn Query,
    filter: &TermFilter,
    limit: usize,
) -> tantivy::Result<Vec<(Score, DocAddress)>> {
    if limit == 0 {
        return Ok(vec![]);
    }
    let weight = words.weight(EnableScoring::enabled_from_searcher(searcher))?;
    // A min-heap of the best so far: its top is the worst of them.
    let mut best: BinaryHeap<std::cmp::Reverse<Entry>> = BinaryHeap::with_capacity(limit + 1);
    let threshold_of = |best: &BinaryHeap<std::cmp::Reverse<Entry>>| match best.peek() {
        Some(worst) if best.len() == limit => worst.0.score,
        _ => Score::MIN,
    };
    for (ordinal, reader) in searcher.segment_readers().iter().enumerate() {
        let Some(mut check) = SegmentCheck::open(reader, filter)? else {
            continue;
        };
        let alive = reader.alive_bitset();
        let mut threshold = threshold_of(&best);
        weight.for_each_pruning(threshold, reader, &mut |doc, score| {
            if alive.is_some_and(|a| a.is_deleted(doc)) || !check.passes(doc) {
                return threshold;
            }
            let entry = Entry {
                score,
                address: DocAddress::new(ordinal as u32, doc),
            };
            best.push(std::cmp::Reverse(entry));
            if best.len() > limit {
                best.pop();
            }
            threshold = threshold_of(&best);
            threshold
        })?;
    }
    let mut found: Vec<Entry> = best.into_iter().map(|e| e.0).collect();
    found.sort_by(|a, b| b.cmp(a));
    Ok(found.into_iter().map(|e| (e.score, e.address)).collect())
}

/// The filter as one segment answers it.
struct SegmentCheck {
    required: Vec<SegmentPostings>,
    any_of: Vec<SegmentPostings>,
    at_least: Option<(Column<i64>, i64)>,
}

impl SegmentCheck {
    /// `None` when no document of the segment can pass.
    fn open(reader: &SegmentReader, filter: &TermFilter) -> tantivy::Result<Option<Self>> {
        let postings = |term: &Term| -> tantivy::Result<Option<SegmentPostings>> {
            Ok(reader
                .inverted_index(term.field())?
                .read_postings(term, IndexRecordOption::Basic)?)
        };
        let mut required = Vec::with_capacity(filter.required.len());
        for term in &filter.required {
            match postings(term)? {
                Some(p) => required.push(p),
                None => return Ok(None),
            }
        }
        let mut any_of = Vec::with_capacity(filter.any_of.len());
        for term in &filter.any_of {
            any_of.extend(postings(term)?);
        }
        if !filter.any_of.is_empty() && any_of.is_empty() {
            return Ok(None);
        }
        let at_least = match filter.at_least {
            Some((field, bound)) => Some((reader.fast_fields().i64(field)?, bound)),
            None => None,
        };
        Ok(Some(Self {
            required,
            any_of,
            at_least,
        }))
    }

    /// Whether `doc` passes; called with increasing documents.
    fn passes(&mut self, doc: DocId) -> bool {
        fn holds(postings: &mut SegmentPostings, doc: DocId) -> bool {
            if postings.doc() < doc {
                postings.seek(doc);
            }
            postings.doc() == doc && doc != TERMINATED
        }
        if !self.required.iter_mut().all(|p| holds(p, doc)) {
            return false;
        }
        // Every `any_of` postings list is moved up to `doc`, so later checks stay in order.
        let mut any = self.any_of.is_empty();
        for p in &mut self.any_of {
            any |= holds(p, doc);
        }
        if !any {
            return false;
        }
        match &self.at_least {
            Some((column, bound)) => column.values_for_doc(doc).any(|v| v >= *bound),
            None => true,
        }
    }
}
