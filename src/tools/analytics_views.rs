//! The analytics views `svc_schema` documents and `svc_query` runs SQL against: one catalog,
//! from which both backends' view definitions are generated. Views expose records' fields in
//! snake_case, JSON as text and timestamps as ISO 8601 text in UTC, and never an organization
//! id: the organization filter is part of each view's definition, not of the caller's SQL.

/// How a view column is computed from its base table's column.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Text,
    Integer,
    /// A timestamp, exposed as `YYYY-MM-DDTHH:MM:SS.sssZ` text.
    Timestamp,
    /// A JSON document, exposed as JSON text.
    Json,
    /// The sum of an integer column over the rows of a group (views with `grouped`).
    Total,
}

#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub name: &'static str,
    /// The base table's column when it is named differently.
    source: Option<&'static str>,
    kind: Kind,
    pub description: &'static str,
}

impl Column {
    /// The type as `svc_schema` documents it.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Text => "text",
            Kind::Integer => "integer",
            Kind::Timestamp => "timestamp (ISO 8601 text, UTC)",
            Kind::Json => "json (text)",
            Kind::Total => "integer",
        }
    }

    fn base(&self) -> &'static str {
        self.source.unwrap_or(self.name)
    }

    fn sqlite_expr(&self) -> String {
        let base = self.base();
        match self.kind {
            Kind::Text | Kind::Integer | Kind::Json => format!("t.\"{base}\""),
            Kind::Timestamp => format!("strftime('%Y-%m-%dT%H:%M:%fZ', t.\"{base}\")"),
            Kind::Total => format!("CAST(SUM(t.\"{base}\") AS BIGINT)"),
        }
    }

    fn postgres_expr(&self) -> String {
        let base = self.base();
        match self.kind {
            Kind::Text | Kind::Integer => format!("t.\"{base}\""),
            Kind::Json => format!("t.\"{base}\"::text"),
            Kind::Timestamp => format!(
                "to_char(t.\"{base}\" AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
            ),
            Kind::Total => format!("CAST(SUM(t.\"{base}\") AS BIGINT)"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct View {
    pub name: &'static str,
    /// The table the view reads, filtered to one organization.
    table: &'static str,
    /// A further condition on the table's rows (`t.` names them), if any.
    rows: Option<&'static str>,
    /// For a view of totals: the `GROUP BY` and `HAVING` clauses after the conditions.
    grouped: Option<&'static str>,
    pub description: &'static str,
    pub columns: &'static [Column],
}

const fn text(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        source: None,
        kind: Kind::Text,
        description,
    }
}

const fn integer(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        source: None,
        kind: Kind::Integer,
        description,
    }
}

const fn timestamp(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        source: None,
        kind: Kind::Timestamp,
        description,
    }
}

const fn json(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        source: None,
        kind: Kind::Json,
        description,
    }
}

const fn renamed(
    name: &'static str,
    source: &'static str,
    kind: Kind,
    description: &'static str,
) -> Column {
    Column {
        name,
        source: Some(source),
        kind,
        description,
    }
}

pub const VIEWS: &[View] = &[
    View {
        name: "customers",
        table: "customers",
        rows: None,
        grouped: None,
        description: "Customer accounts: billing state, revenue, activity and traits.",
        columns: &[
            text("id", "Customer id."),
            text("name", "Account name."),
            text("domain", "Primary web domain; null when unknown."),
            text("external_id", "Your system's id for the account (the Ingest API's customerId); null when unset."),
            text("billing_status", "PAYING, TRIALING, CHURNED or NONE."),
            integer("mrr_cents", "Monthly recurring revenue in cents."),
            timestamp("last_activity_at", "Latest tracked activity; null when none."),
            json("traits", "Account traits as a JSON object (e.g. json_extract(traits, '$.plan') on SQLite, traits::jsonb->>'plan' on PostgreSQL)."),
            timestamp("created_at", "When the customer was first recorded."),
        ],
    },
    View {
        name: "users",
        table: "users",
        rows: None,
        grouped: None,
        description: "People at customer accounts (the product's end users).",
        columns: &[
            text("id", "User id."),
            text("customer_id", "The user's customer (customers.id); null when unattributed."),
            text("email", "Email address; null when unknown."),
            text("external_id", "Your system's id for the user (identify userId); null when unset."),
            text("name", "Display name; null when unknown."),
            text("stage", "Journey stage: discovered, signed_up, activated, engaged or inactive."),
            json("traits", "User traits as a JSON object."),
            timestamp("last_activity_at", "Latest tracked activity; null when none."),
            timestamp("created_at", "When the user was first recorded."),
        ],
    },
    View {
        name: "workspace_users",
        table: "workspace_users",
        rows: None,
        grouped: None,
        description: "Your own team: CSMs, managers, account owners and admins.",
        columns: &[
            text("id", "Workspace user id."),
            text("name", "Name."),
            text("email", "Email address."),
            text("role", "CSM, MANAGER, ACCOUNT_OWNER or ADMIN."),
            timestamp("created_at", "When the workspace user was added."),
        ],
    },
    View {
        name: "facts",
        table: "facts",
        rows: None,
        grouped: None,
        description: "Stored facts about customers with their provenance (the source they were taken from).",
        columns: &[
            text("id", "Fact id."),
            text("customer_id", "The customer the fact is about (customers.id)."),
            text("text", "The fact, as a sentence."),
            text("status", "ACTIVE, SUPERSEDED or RETRACTED."),
            text("source_type", "Type of the source: CALL, EMAIL, CALENDAR_EVENT, SUPPORT_TICKET or OPPORTUNITY."),
            text("source_id", "The source's id within its type (sources.source_id)."),
            timestamp("source_occurred_at", "When the source occurred."),
            text("source_quote", "The words in the source the fact rests on."),
            text("permalink", "Link to the source in its system; null when none."),
            timestamp("created_at", "When the fact was recorded."),
        ],
    },
    View {
        name: "sources",
        table: "sources",
        rows: None,
        grouped: None,
        description: "Source records: calls, emails, calendar events, support tickets and opportunities.",
        columns: &[
            text("source_type", "CALL, EMAIL, CALENDAR_EVENT, SUPPORT_TICKET or OPPORTUNITY."),
            text("source_id", "The source's id within its type; (source_type, source_id) is unique."),
            text("customer_id", "The customer it concerns (customers.id); null when unattributed."),
            text("title", "Title or subject."),
            text("body", "Full text (transcript, message, notes)."),
            timestamp("occurred_at", "When it happened."),
            text("permalink", "Link to it in its system; null when none."),
            json("participants", "Participants as a JSON array of strings."),
            timestamp("created_at", "When it was recorded."),
        ],
    },
    View {
        name: "events",
        table: "events",
        rows: None,
        grouped: None,
        description: "Tracked events accepted by the Ingest API, one row per event, visible as soon as the Ingest API has answered; user_id and customer_id follow within seconds, when the event's effects are applied.",
        columns: &[
            text("id", "Event id."),
            text("message_id", "The sender's message id; null when none was sent."),
            renamed("type", "event_type", Kind::Text, "pageview, custom, form, identify, engagement, calendar, stage or billing."),
            text("event_name", "Custom event name; null for other types."),
            text("visitor_id", "Browser visitor id; null for server events without one."),
            text("user_id", "Resolved user (users.id); null when unresolved or not resolved yet."),
            text("customer_id", "Resolved customer (customers.id); null when unresolved or not resolved yet."),
            text("url", "Page URL (server events use server://...)."),
            text("path", "URL path."),
            timestamp("occurred_at", "When the event happened (its timestamp, else receipt time)."),
            timestamp("received_at", "When the service received it."),
            json("data", "The event's type-specific fields as a JSON object, sensitive form fields stripped."),
        ],
    },
    View {
        name: "billing_history",
        table: "billing_history",
        rows: None,
        grouped: None,
        description: "Billing changes per customer over time (from ingest, syncs, webhooks and imports).",
        columns: &[
            text("id", "Change id."),
            text("customer_id", "The customer (customers.id)."),
            timestamp("at", "When the change took effect."),
            text("billing_status", "Status after the change: PAYING, TRIALING, CHURNED or NONE."),
            integer("mrr_cents", "Monthly recurring revenue in cents after the change."),
            text("origin", "Where the change came from (e.g. ingest, stripe, import)."),
        ],
    },
    View {
        name: "engagement_sessions",
        table: "engagement_sessions",
        rows: None,
        grouped: None,
        description: "Engagement sessions of visitors: active and total time per session.",
        columns: &[
            text("id", "Row id."),
            text("session_id", "The tracker's session id."),
            text("visitor_id", "Browser visitor id; null when unknown."),
            integer("active_time_ms", "Active (focused, interacting) time in milliseconds."),
            integer("total_time_ms", "Total time in milliseconds."),
            timestamp("started_at", "Session start."),
            timestamp("last_seen_at", "Latest activity in the session."),
        ],
    },
    View {
        name: "customer_totals",
        table: "record_counts",
        rows: Some("t.record = 'customers'"),
        grouped: Some("GROUP BY t.bucket HAVING SUM(t.n) <> 0"),
        description: "Customers and their monthly recurring revenue per billing status, one row per status, kept current with every change: read totals by status here instead of aggregating the customers view (one row per status instead of every customer).",
        columns: &[
            renamed("billing_status", "bucket", Kind::Text, "PAYING, TRIALING, CHURNED or NONE."),
            renamed("customers", "n", Kind::Total, "Customers in this status."),
            renamed("mrr_cents", "amount", Kind::Total, "Sum of their monthly recurring revenue in cents."),
        ],
    },
    View {
        name: "user_totals",
        table: "record_counts",
        rows: Some("t.record = 'users'"),
        grouped: Some("GROUP BY t.bucket HAVING SUM(t.n) <> 0"),
        description: "Users per journey stage, one row per stage, kept current with every change: read totals by stage here instead of aggregating the users view.",
        columns: &[
            renamed("stage", "bucket", Kind::Text, "discovered, signed_up, activated, engaged or inactive."),
            renamed("users", "n", Kind::Total, "Users in this stage."),
        ],
    },
];

/// A view whose rows are counted (and some columns summed) per bucket in a totals view above:
/// what lets `svc_query` answer such aggregates from the totals (`query_kept_totals`).
pub struct KeptTotals {
    pub view: &'static str,
    pub totals: &'static str,
    /// The view's column that the totals are per value of (also the totals' column).
    pub bucket: &'static str,
    /// The totals' column holding how many rows have that value.
    pub count: &'static str,
    /// The view's integer columns whose sums the totals keep, under the same names.
    pub sums: &'static [&'static str],
}

pub const KEPT_TOTALS: &[KeptTotals] = &[
    KeptTotals {
        view: "customers",
        totals: "customer_totals",
        bucket: "billing_status",
        count: "customers",
        sums: &["mrr_cents"],
    },
    KeptTotals {
        view: "users",
        totals: "user_totals",
        bucket: "stage",
        count: "users",
        sums: &[],
    },
];

/// Where a column of the `events` view comes from for an event still in the ingest journal
/// (acknowledged, effects not yet applied): the journal row holds the validated batch as JSON.
enum Pending {
    /// A field of the journaled event.
    Event(&'static str),
    /// A timestamp field of the journaled event.
    EventTime(&'static str),
    /// A field of its batch.
    Batch(&'static str),
    /// When the batch was received (a column of the journal row).
    ReceivedAt,
    /// Resolved by the applier: null until then.
    Unresolved,
}

/// The select list of journaled events, in the `events` view's column order.
fn pending_events_select(expr: impl Fn(Pending) -> String) -> String {
    let sources = [
        ("id", Pending::Event("id")),
        ("message_id", Pending::Event("message_id")),
        ("type", Pending::Event("event_type")),
        ("event_name", Pending::Event("event_name")),
        ("visitor_id", Pending::Batch("visitor_id")),
        ("user_id", Pending::Unresolved),
        ("customer_id", Pending::Unresolved),
        ("url", Pending::Event("url")),
        ("path", Pending::Event("path")),
        ("occurred_at", Pending::EventTime("occurred_at")),
        ("received_at", Pending::ReceivedAt),
        ("data", Pending::Event("data")),
    ];
    sources
        .into_iter()
        .map(|(name, source)| format!("{} AS {}", expr(source), quote_ident(name)))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn find(name: &str) -> Option<&'static View> {
    VIEWS.iter().find(|v| v.name == name)
}

pub fn names() -> Vec<&'static str> {
    VIEWS.iter().map(|v| v.name).collect()
}

/// Where a SQLite database's pending events are (see `crate::ingest::journal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingJournal {
    /// `main.ingest_journal`, every row pending.
    InDatabase,
    /// The journal's own file attached as `ingest`; rows above `main.ingest_applied` pending.
    OwnFile,
}

/// A SQL string literal.
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// A SQL identifier.
pub fn quote_ident(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

impl View {
    /// What follows the organization condition: the view's own condition and grouping.
    fn further_condition(&self) -> String {
        let mut sql = self.rows.map(|c| format!(" AND {c}")).unwrap_or_default();
        if let Some(grouped) = self.grouped {
            sql.push(' ');
            sql.push_str(grouped);
        }
        sql
    }

    fn select_list(&self, expr: impl Fn(&Column) -> String) -> String {
        self.columns
            .iter()
            .map(|c| format!("{} AS {}", expr(c), quote_ident(c.name)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// SQLite: a TEMP view over `main.<table>` holding one organization's rows (the id is a
    /// literal in the definition, so nothing the caller's SQL does can change it). `events`
    /// adds the journal's pending events, from `journal`.
    pub fn sqlite_temp_view(&self, organization_id: &str, journal: PendingJournal) -> String {
        let org = quote_literal(organization_id);
        let mut sql = format!(
            "CREATE TEMP VIEW {} AS SELECT {} FROM main.{} AS t WHERE t.organization_id = {org}{}",
            quote_ident(self.name),
            self.select_list(Column::sqlite_expr),
            quote_ident(self.table),
            self.further_condition(),
        );
        if self.name == "events" {
            let (table, pending) = match journal {
                PendingJournal::InDatabase => ("main.ingest_journal", ""),
                PendingJournal::OwnFile => (
                    "ingest.ingest_journal",
                    " AND j.seq > (SELECT a.seq FROM main.ingest_applied AS a WHERE a.id = 1)",
                ),
            };
            sql.push_str(&format!(
                " UNION ALL SELECT {} FROM {table} AS j, \
                 json_each(j.batch, '$.events') AS e WHERE j.organization_id = {org}{pending}",
                pending_events_select(|field| match field {
                    Pending::Event(path) => format!("json_extract(e.value, '$.{path}')"),
                    Pending::EventTime(path) => format!(
                        "strftime('%Y-%m-%dT%H:%M:%fZ', json_extract(e.value, '$.{path}'))"
                    ),
                    Pending::Batch(path) => format!("json_extract(j.batch, '$.{path}')"),
                    Pending::ReceivedAt => {
                        "strftime('%Y-%m-%dT%H:%M:%fZ', j.received_at)".to_string()
                    }
                    Pending::Unresolved => "NULL".to_string(),
                }),
            ));
        }
        sql
    }

    /// PostgreSQL: a view in `views_schema` over `data_schema.<table>` holding the rows of the
    /// organization registered for the querying backend in `data_schema.query_sessions`
    /// (written by the service, unreadable and unwritable by the query role).
    pub fn postgres_view(&self, views_schema: &str, data_schema: &str) -> String {
        let org = format!(
            "(SELECT s.organization_id FROM {}.query_sessions AS s \
             WHERE s.backend_pid = pg_backend_pid())",
            quote_ident(data_schema)
        );
        let mut sql = format!(
            "CREATE OR REPLACE VIEW {}.{} WITH (security_barrier) AS SELECT {} FROM {}.{} AS t \
             WHERE t.organization_id = {org}{}",
            quote_ident(views_schema),
            quote_ident(self.name),
            self.select_list(Column::postgres_expr),
            quote_ident(data_schema),
            quote_ident(self.table),
            self.further_condition(),
        );
        if self.name == "events" {
            let utc = |expr: String| {
                format!("to_char({expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
            };
            sql.push_str(&format!(
                " UNION ALL SELECT {} FROM {}.ingest_journal AS j \
                 CROSS JOIN LATERAL (SELECT j.batch::jsonb AS batch) AS jb \
                 CROSS JOIN LATERAL jsonb_array_elements(jb.batch -> 'events') AS e(value) \
                 WHERE j.organization_id = {org}",
                pending_events_select(|field| match field {
                    Pending::Event("data") => "(e.value -> 'data')::text".to_string(),
                    Pending::Event(path) => format!("(e.value ->> '{path}')"),
                    Pending::EventTime(path) => utc(format!("(e.value ->> '{path}')::timestamptz")),
                    Pending::Batch(path) => format!("(jb.batch ->> '{path}')"),
                    Pending::ReceivedAt => utc("j.received_at".to_string()),
                    Pending::Unresolved => "NULL::text".to_string(),
                }),
                quote_ident(data_schema),
            ));
        }
        sql
    }
}
