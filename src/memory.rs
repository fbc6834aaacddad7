//! Where the process's resident memory is: its own pages, the database file's pages SQLite
//! maps, and the two parts that grow with the data (the search replica and the messageId
//! window), for `/metrics`, the start-up log and the benchmarks.

/// Where the process's resident memory is, from `/proc/self/status` (zero where it cannot be
/// read) and the parts' own accounts.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryReport {
    pub process_own: u64,
    pub mapped_database: u64,
    pub search_index: u64,
    pub message_window: u64,
}

impl MemoryReport {
    pub fn now(search: &crate::search::SearchIndex) -> Self {
        Self::with_search_index(search.memory_bytes())
    }

    /// The report, given the search index's bytes.
    pub fn with_search_index(search_index: u64) -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        Self {
            process_own: kib("RssAnon:"),
            mapped_database: kib("RssFile:"),
            search_index,
            message_window: crate::ingest::stats::stats()
                .window_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    pub fn parts(&self) -> [(&'static str, u64); 4] {
        [
            ("process_own", self.process_own),
            ("mapped_database", self.mapped_database),
            ("search_index", self.search_index),
            ("message_window", self.message_window),
        ]
    }
}

impl std::fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        write!(
            f,
            "{:.0} MiB own (search index {:.0} MiB, messageId window {:.0} MiB), \
             {:.0} MiB of mapped database pages",
            mib(self.process_own),
            mib(self.search_index),
            mib(self.message_window),
            mib(self.mapped_database)
        )
    }
}
