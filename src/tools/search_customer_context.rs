//! `svc_search_customer_context`: relevance-ranked (BM25) search over the organization's
//! source records (title and body) and active facts, one result per artifact with its best
//! passages.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    common::{normalize_source_type, resolve_customer, SOURCE_TYPES},
    ToolContext, ToolError, ToolResult,
};
use crate::{
    search::{best_passages, load_hits, round_score, Artifact, SearchFilter},
    timestamp,
    validation::ValidationIssue,
};

/// Results when `topK` is not given.
const DEFAULT_TOP_K: i64 = 10;
const MAX_TOP_K: i64 = 100;
/// Passages per result at most.
const PASSAGES_PER_RESULT: usize = 3;
/// How long a search waits for the index's first build after a start.
const BUILD_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// What to look for, in plain words (e.g. `renewal pricing concerns`). Words are matched
    /// in their stemmed form; more matching words and rarer words rank higher.
    #[schemars(length(min = 1))]
    pub query: String,
    /// Only this customer's context: the customer's id, its domain, or its external id (tried
    /// in that order).
    pub customer: Option<String>,
    /// Only these source types: `CALL`, `EMAIL`, `CALENDAR_EVENT`, `SUPPORT_TICKET`,
    /// `OPPORTUNITY` (trimmed and case-insensitive; `CRM` and `CRM_OPPORTUNITY` mean
    /// `OPPORTUNITY`). A fact matches by the type of the source it was taken from.
    pub source_types: Option<Vec<String>>,
    /// Only artifacts that occurred at or after this time (ISO 8601, e.g.
    /// `2026-10-01T00:00:00Z`): a source's `occurredAt`, a fact's `sourceOccurredAt`.
    pub after: Option<String>,
    /// How many results to return, 1 to 100 (default 10).
    #[schemars(range(min = 1, max = 100), extend("default" = 10))]
    pub top_k: Option<i64>,
}

pub const DESCRIPTION: &str = "Search the organization's customer context: calls, emails, \
calendar events, support tickets, opportunities (title and body) and the active facts taken \
from them. Results are ranked by relevance (BM25), best first, one per artifact: a `source` \
(its `id` is the source's sourceId) or a `fact` (its `title` is the fact's text, \
`sourceType`/`sourceId` its provenance), each with a score and its best-matching passages. \
Narrow by `customer`, `sourceTypes` and `after`; `topK` sets the number of results. Use \
svc_get_source or svc_get_fact to read a result in full.";

/// The filter the input asks for, or every problem with it.
/// The query text, canonical source types, `after` and `topK` of a valid input.
type Checked = (String, Vec<String>, Option<DateTime<Utc>>, usize);

fn checked(input: &Input) -> ToolResult<Checked> {
    let mut issues = Vec::new();
    let query = input.query.trim().to_string();
    if query.is_empty() {
        issues.push(ValidationIssue::at("query", "must not be empty"));
    }
    let mut types: Vec<String> = Vec::new();
    for (i, raw) in input.source_types.iter().flatten().enumerate() {
        match normalize_source_type(raw) {
            Some(t) => {
                if !types.iter().any(|seen| seen == t) {
                    types.push(t.to_string());
                }
            }
            None => issues.push(ValidationIssue::new(
                vec!["sourceTypes".into(), i.into()],
                format!(
                    "unknown source type `{raw}`; expected one of {}",
                    SOURCE_TYPES.join(", ")
                ),
            )),
        }
    }
    let after = match &input.after {
        None => None,
        Some(raw) => match parse_instant(raw) {
            Some(at) => Some(at),
            None => {
                issues.push(ValidationIssue::at(
                    "after",
                    "must be an ISO 8601 date-time (e.g. 2026-10-01T00:00:00Z) or date",
                ));
                None
            }
        },
    };
    let top_k = input.top_k.unwrap_or(DEFAULT_TOP_K);
    if !(1..=MAX_TOP_K).contains(&top_k) {
        issues.push(ValidationIssue::at(
            "topK",
            format!("must be between 1 and {MAX_TOP_K}"),
        ));
    }
    if !issues.is_empty() {
        return Err(ToolError::Invalid(issues));
    }
    Ok((query, types, after, top_k as usize))
}

/// ISO 8601: a date-time with an offset, or a date (midnight UTC).
fn parse_instant(raw: &str) -> Option<DateTime<Utc>> {
    let raw = raw.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Some(at.with_timezone(&Utc));
    }
    chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|dt| dt.and_utc())
}

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let (query, source_types, after, top_k) = checked(&input)?;
    let customer_id = match &input.customer {
        Some(reference) => Some(resolve_customer(ctx, reference).await?.id),
        None => None,
    };
    let index = &ctx.state.search;
    if !index.wait_built(BUILD_WAIT).await {
        return Err(ToolError::Internal(
            "the search index is still being built; try again shortly".into(),
        ));
    }
    let filter = SearchFilter {
        organization_id: ctx.organization_id.clone(),
        customer_id,
        source_types,
        after_ms: after.map(|a| a.timestamp_millis()),
    };
    let hits = index
        .search_admitted(query.clone(), filter, top_k)
        .await
        .map_err(|e| ToolError::Internal(format!("search failed: {e}")))?;
    let words = index.analyze(&query);
    let rows = load_hits(ctx.db().await?, &ctx.organization_id, &hits).await?;
    let results: Vec<Value> = rows
        .into_iter()
        .map(|(hit, artifact)| {
            let score = round_score(hit.score);
            match artifact {
                Artifact::Source(s) => {
                    // The title is a field of its own; passages come from the body.
                    let text = if s.body.trim().is_empty() { &s.title } else { &s.body };
                    json!({
                        "type": "source",
                        "id": s.source_id,
                        "score": score,
                        "customerId": s.customer_id,
                        "sourceType": s.source_type,
                        "sourceId": s.source_id,
                        "title": s.title,
                        "occurredAt": timestamp::format(&s.occurred_at),
                        "passages": best_passages(text, &words, |t| index.analyze(t), PASSAGES_PER_RESULT),
                    })
                }
                Artifact::Fact(f) => {
                    // The fact is the title; its passage is the quote it rests on.
                    let text = if f.source_quote.trim().is_empty() { &f.text } else { &f.source_quote };
                    json!({
                        "type": "fact",
                        "id": f.id,
                        "score": score,
                        "customerId": f.customer_id,
                        "sourceType": f.source_type,
                        "sourceId": f.source_id,
                        "title": f.text,
                        "occurredAt": timestamp::format(&f.source_occurred_at),
                        "passages": best_passages(text, &words, |t| index.analyze(t), PASSAGES_PER_RESULT),
                    })
                }
            }
        })
        .collect();
    Ok(json!({ "results": results }))
}
