//! Which trigrams are common among a table's names, so a PostgreSQL name lookup asks its trigram
//! index for the needle's rare parts only.
//!
//! A `LIKE '%needle%'` lookup through a `pg_trgm` GIN index reads every index entry of each of
//! the needle's trigrams, whatever the others select: a trigram that nearly every name holds
//! ("com" where every name is "Company ...") costs a read of an entry per name (10 ms for four
//! such trigrams at 500,000 users, measured in `EXPLAIN ANALYZE`), and narrows the matches by
//! little. So the lookup asks the index for the runs of the needle's rare trigrams (a pattern such
//! as `%34567%` that every name holding the needle also matches) and checks the whole needle on
//! each row the index finds. Which trigrams are common is sampled from the table (all
//! organizations: the index holds them all) in the background, when an instance starts and
//! again at the first lookup after each [`RESAMPLE_AFTER`]; a wrong guess costs time, never a
//! wrong answer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

use super::name_search::NamesOf;

/// A trigram held by more than this share of the sampled names is common.
const COMMON_SHARE: f64 = 0.1;
/// About how many names a sample reads.
const SAMPLED_NAMES: f64 = 20_000.0;
/// How long a sample stands before the next lookup refreshes it in the background.
const RESAMPLE_AFTER: Duration = Duration::from_secs(600);

/// The common trigrams of each table's names, as last sampled. Cloned handles share them.
#[derive(Clone, Debug, Default)]
pub struct CommonTrigrams(Arc<Mutex<HashMap<NamesOf, Sample>>>);

#[derive(Debug, Default)]
struct Sample {
    common: Arc<HashSet<String>>,
    /// When the sample was taken; `None` before the first.
    taken: Option<Instant>,
    sampling: bool,
}

impl CommonTrigrams {
    /// The common trigrams of `names`' table as last sampled, without waiting: a table never
    /// sampled, or sampled [`RESAMPLE_AFTER`] ago, is sampled in the background (a sample of a
    /// large table read from disk takes most of a second), and meanwhile the lookups ask for
    /// whole needles (an empty set) or go by the older sample.
    pub fn of(&self, db: &DatabaseConnection, names: NamesOf) -> Arc<HashSet<String>> {
        let mut samples = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let sample = samples.entry(names).or_default();
        let due = sample.taken.is_none_or(|t| t.elapsed() >= RESAMPLE_AFTER);
        if due && !sample.sampling {
            sample.sampling = true;
            let (this, db) = (self.clone(), db.clone());
            tokio::spawn(async move { this.resample(&db, names).await });
        }
        sample.common.clone()
    }

    /// Samples `names`' table now. Where the sample fails (no `pg_trgm`, a database that is
    /// down) the lookups ask for whole needles until the next.
    pub async fn resample(&self, db: &DatabaseConnection, names: NamesOf) {
        let common = sample_common(db, names).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "sampling names' trigrams failed: lookups use whole needles");
            HashSet::new()
        });
        let mut samples = self.0.lock().unwrap_or_else(|e| e.into_inner());
        samples.insert(
            names,
            Sample {
                common: Arc::new(common),
                taken: Some(Instant::now()),
                sampling: false,
            },
        );
    }
}

/// Reads a sample of about [`SAMPLED_NAMES`] of the table's pages' names (`TABLESAMPLE
/// SYSTEM`) and returns the trigrams (as `pg_trgm`'s `show_trgm` writes them) that more than
/// [`COMMON_SHARE`] of them hold. Nothing where `pg_trgm` is not installed.
async fn sample_common(db: &DatabaseConnection, names: NamesOf) -> Result<HashSet<String>, DbErr> {
    let backend = db.get_database_backend();
    if backend != DbBackend::Postgres {
        return Ok(HashSet::new());
    }
    let schema = db
        .query_one_raw(Statement::from_string(
            backend,
            "SELECT n.nspname AS s FROM pg_extension e JOIN pg_namespace n \
             ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'",
        ))
        .await?;
    let Some(schema) = schema else {
        return Ok(HashSet::new());
    };
    let schema: String = schema.try_get("", "s")?;
    let table = names.records();
    // Rows as the statistics last counted them, or from the table's size before any were.
    let rows: f64 = db
        .query_one_raw(Statement::from_string(
            backend,
            format!(
                "SELECT CASE WHEN c.reltuples > 0 THEN c.reltuples::float8 \
                 ELSE pg_relation_size(c.oid)::float8 / 8192 * 50 END AS n \
                 FROM pg_class c WHERE c.oid = to_regclass('{table}')"
            ),
        ))
        .await?
        .map(|row| row.try_get("", "n"))
        .transpose()?
        .unwrap_or(0.0);
    let percent = (100.0 * SAMPLED_NAMES / rows.max(1.0)).clamp(0.001, 100.0);
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            format!(
                "WITH s AS (SELECT lower(name) AS n FROM \"{table}\" TABLESAMPLE SYSTEM ($1) \
                 WHERE name IS NOT NULL) \
                 SELECT t FROM s, unnest(\"{schema}\".show_trgm(s.n)) AS t GROUP BY t \
                 HAVING count(*) > $2 * (SELECT count(*) FROM s)"
            ),
            [percent.into(), COMMON_SHARE.into()],
        ))
        .await?;
    rows.iter().map(|row| row.try_get("", "t")).collect()
}

/// The `LIKE` pattern of the needle's rare parts (`%part%part%`): within each word (a run of
/// letters and digits, as `pg_trgm` splits text), the runs of consecutive trigrams not in
/// `common`, runs that would overlap joined (keeping the one common trigram between them). Every
/// text holding `needle` matches it (its parts are pieces of the needle, in order, apart). `None`
/// where it would drop no trigram, or keep none: the whole needle is then the lookup.
pub fn rare_parts(needle: &str, common: &HashSet<String>) -> Option<String> {
    let chars: Vec<char> = needle.chars().collect();
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut trigrams = 0;
    let mut start = 0;
    while start < chars.len() {
        if !chars[start].is_alphanumeric() {
            start += 1;
            continue;
        }
        let mut end = start;
        while end < chars.len() && chars[end].is_alphanumeric() {
            end += 1;
        }
        for i in start..end.saturating_sub(2) {
            trigrams += 1;
            let trigram: String = chars[i..i + 3].iter().collect();
            if common.contains(&trigram) {
                continue;
            }
            match parts.last_mut() {
                // Overlapping (or continuing) the previous part: one part.
                Some((_, last_end)) if *last_end > i => *last_end = i + 3,
                _ => parts.push((i, i + 3)),
            }
        }
        start = end;
    }
    let kept: usize = parts.iter().map(|(from, to)| to - from - 2).sum();
    if kept == trigrams || parts.is_empty() {
        return None;
    }
    let mut pattern = String::from("%");
    for (from, to) in parts {
        pattern.extend(&chars[from..to]);
        pattern.push('%');
    }
    Some(pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(list: &[&str]) -> HashSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rare_parts_keep_runs_of_rare_trigrams_in_order() {
        let c = common(&["use", "ser", "com", "omp", "mpa", "pan", "any"]);
        assert_eq!(rare_parts("user 34567", &c).as_deref(), Some("%34567%"));
        assert_eq!(
            rare_parts("company 123 blue", &c).as_deref(),
            Some("%123%blue%")
        );
        // Two common trigrams in a row inside a word split it...
        let c2 = common(&["cde", "def"]);
        assert_eq!(rare_parts("abcdefg", &c2).as_deref(), Some("%abcd%efg%"));
        // ...one alone does not: the parts either side of it would overlap.
        assert_eq!(rare_parts("xusey", &c), None);
        assert_eq!(rare_parts("abcusexyz", &c), None);
        assert_eq!(rare_parts("abcde", &common(&["bcd"])), None);
    }

    #[test]
    fn whole_needle_where_nothing_or_everything_is_common() {
        let c = common(&["use", "ser"]);
        assert_eq!(rare_parts("acme", &c), None);
        assert_eq!(rare_parts("user", &c), None);
        assert_eq!(rare_parts("user ab", &c), None);
        assert_eq!(rare_parts("", &c), None);
    }

    #[test]
    fn every_text_holding_the_needle_matches_its_pattern() {
        let c = common(&["use", "ser", "er1", "123", "bcd"]);
        for needle in ["user 34567", "xuser12345", "abcdef user", "zz-use-abcd"] {
            let Some(pattern) = rare_parts(needle, &c) else {
                continue;
            };
            let text = format!("prefix {needle} suffix");
            let mut at = 0;
            for part in pattern.split('%').filter(|p| !p.is_empty()) {
                let found = text[at..].find(part).expect("part in order");
                at += found + part.len();
            }
        }
    }
}
