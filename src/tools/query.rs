//! `svc_query`: one read-only SQL statement over the analytics views, confined to the caller's
//! organization by construction:
//!
//! - SQLite: a fresh connection opened read-only (`SQLITE_OPEN_READONLY`) gets TEMP views
//!   named like the analytics views, each `SELECT ... FROM main.<table> WHERE organization_id =
//!   '<caller's organization>'`; then an authorizer allows only `SELECT`, reads of base tables
//!   made *through those views*, functions and recursive CTEs, so `main.customers`, writes,
//!   DDL, `ATTACH` and `PRAGMA` are refused when the statement is prepared. A progress handler
//!   interrupts it at the time limit.
//! - PostgreSQL: the statement runs on a connection logged in as the query role, which may
//!   only select the analytics views (`<schema>_analytics`); the views filter on the
//!   organization the service registered for that backend's pid in `query_sessions` before the
//!   call, which the role can neither read nor change. The transaction is `READ ONLY` with a
//!   statement timeout. Logging in as a separate role matters: `SET ROLE` could be undone by
//!   the caller's SQL. The role's connections are kept for later calls; after each call its
//!   transaction is rolled back and `DISCARD ALL` leaves the session as a new one.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseConnection, Statement};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    analytics_views,
    query_kept_totals::{self, QueryDialect},
    ToolContext, ToolError, ToolResult,
};
use crate::validation::ValidationIssue;

const DEFAULT_MAX_ROWS: i64 = 1000;
const MAX_MAX_ROWS: i64 = 10_000;
/// The time limit of one statement.
pub const TIME_LIMIT: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// One read-only SQL statement (`SELECT` or `WITH ... SELECT`) over the analytics views
    /// (see svc_schema), e.g. `SELECT billing_status, count(*) FROM customers GROUP BY 1`.
    /// SQLite or PostgreSQL dialect, whichever the service runs on.
    #[schemars(length(min = 1))]
    pub sql: String,
    /// Rows returned at most, 1 to 10000 (default 1000); `truncated` says when more matched.
    #[schemars(range(min = 1, max = 10000), extend("default" = 1000))]
    pub max_rows: Option<i64>,
}

pub const DESCRIPTION: &str = "Run one read-only SQL statement (SELECT or WITH ... SELECT) \
against the analytics views (customers, users, workspace_users, facts, sources, events, \
billing_history, engagement_sessions, customer_totals, user_totals; see svc_schema for their \
columns). The views hold only your organization's rows. Counts and revenue by billing \
status and users by stage are kept current with every change in customer_totals and \
user_totals: a count(*), sum(mrr_cents) or avg(mrr_cents) of customers (count(*) of users) \
grouped by billing_status (stage) or not grouped, filtered on that column alone, is answered \
from them in a few ms; other aggregates read every row. Writes, schema changes, ATTACH, \
PRAGMA, several statements and reading anything but the views are \
refused; a statement gets 5 seconds. Returns {columns, rows, rowCount, truncated}: at most \
maxRows rows (default 1000, up to 10000).";

const REFUSED_PREFIX: &str = "svc_query runs one read-only SELECT over the analytics views";

/// A query's answer.
#[derive(Debug, Default)]
struct Answer {
    columns: Vec<String>,
    rows: Vec<Vec<Value>>,
    truncated: bool,
}

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let mut issues = Vec::new();
    let sql = input.sql.trim().to_string();
    if sql.is_empty() {
        issues.push(ValidationIssue::at("sql", "must not be empty"));
    }
    let max_rows = input.max_rows.unwrap_or(DEFAULT_MAX_ROWS);
    if !(1..=MAX_MAX_ROWS).contains(&max_rows) {
        issues.push(ValidationIssue::at(
            "maxRows",
            format!("must be between 1 and {MAX_MAX_ROWS}"),
        ));
    }
    if !issues.is_empty() {
        return Err(ToolError::Invalid(issues));
    }
    let max_rows = max_rows as usize;
    let answer = match ctx.state.db.get_database_backend() {
        DatabaseBackend::Sqlite => {
            let path = sqlite_file(&ctx.state.db)?;
            let org = ctx.organization_id.clone();
            tokio::task::spawn_blocking(move || sqlite::run(&path, &org, &sql, max_rows))
                .await
                .map_err(|e| ToolError::Internal(format!("query task failed: {e}")))??
        }
        DatabaseBackend::Postgres => {
            postgres::run(&ctx.state.db, &ctx.organization_id, &sql, max_rows).await?
        }
        other => {
            return Err(ToolError::Internal(format!(
                "svc_query does not support {other:?}"
            )))
        }
    };
    Ok(json!({
        "columns": answer.columns,
        "rowCount": answer.rows.len(),
        "rows": answer.rows,
        "truncated": answer.truncated,
    }))
}

fn sqlite_file(db: &DatabaseConnection) -> ToolResult<PathBuf> {
    let options = db.get_sqlite_connection_pool().connect_options();
    let path = options.get_filename().to_path_buf();
    if path.as_os_str().is_empty() || path.to_string_lossy().contains(":memory:") {
        return Err(ToolError::Internal(
            "svc_query needs a file database (an in-memory SQLite database cannot be opened twice)"
                .into(),
        ));
    }
    Ok(path)
}

fn time_limit_message() -> String {
    format!(
        "the statement ran past svc_query's time limit of {} seconds; narrow it (filters, \
         LIMIT, fewer joins)",
        TIME_LIMIT.as_secs()
    )
}

mod sqlite {
    use rusqlite::{
        hooks::{AuthAction, AuthContext, Authorization},
        types::ValueRef,
        Connection, OpenFlags,
    };

    use super::*;

    /// Runs `sql` for `organization_id` on a new read-only connection to `path`. Blocking.
    pub(super) fn run(
        path: &std::path::Path,
        organization_id: &str,
        sql: &str,
        max_rows: usize,
    ) -> ToolResult<Answer> {
        let internal = |e: rusqlite::Error| ToolError::Internal(format!("query database: {e}"));
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(internal)?;
        conn.busy_timeout(TIME_LIMIT).map_err(internal)?;
        // Pending events are in the journal's own file when the service made one (and has
        // created its table: the file exists a moment before that, at the service's start).
        let journal_file = crate::ingest::journal::own_file_path(path);
        let mut journal = analytics_views::PendingJournal::InDatabase;
        if journal_file.exists() {
            conn.execute(
                "ATTACH DATABASE ?1 AS ingest",
                [journal_file.to_string_lossy().as_ref()],
            )
            .map_err(internal)?;
            let tables: i64 = conn
                .query_row(
                    "SELECT count(*) FROM ingest.sqlite_master WHERE type = 'table' \
                     AND name = 'ingest_journal'",
                    [],
                    |row| row.get(0),
                )
                .map_err(internal)?;
            if tables == 1 {
                journal = analytics_views::PendingJournal::OwnFile;
            } else {
                conn.execute("DETACH DATABASE ingest", [])
                    .map_err(internal)?;
            }
        }
        // TEMP views shadow the base tables of the same name: `customers` is the view.
        // A fresh connection has an empty page cache: map the file so a scan reads the OS page
        // cache directly (set before the authorizer, which refuses PRAGMA from callers).
        let mut ddl = format!("PRAGMA mmap_size = {};\n", crate::db::SQLITE_MMAP_BYTES);
        for view in analytics_views::VIEWS {
            ddl.push_str(&view.sqlite_temp_view(organization_id, journal));
            ddl.push_str(";\n");
        }
        conn.execute_batch(&ddl).map_err(internal)?;
        if journal == analytics_views::PendingJournal::OwnFile {
            // One read transaction, the journal's snapshot taken before the main file's: a
            // batch the applier moved in between is then in `events` or still pending, never
            // in neither (it deletes from the journal only after its main commit).
            conn.execute_batch("BEGIN").map_err(internal)?;
            conn.query_row(
                "SELECT count(*) FROM ingest.ingest_journal WHERE seq < 0",
                [],
                |_| Ok(()),
            )
            .map_err(internal)?;
            conn.query_row("SELECT seq FROM main.ingest_applied", [], |_| Ok(()))
                .map_err(internal)?;
        }

        let refusal: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let noted = refusal.clone();
        conn.authorizer(Some(move |ctx: AuthContext<'_>| {
            let verdict = authorize(&ctx);
            if let Err(reason) = &verdict {
                if let Ok(mut slot) = noted.lock() {
                    slot.get_or_insert_with(|| reason.clone());
                }
            }
            match verdict {
                Ok(()) => Authorization::Allow,
                Err(_) => Authorization::Deny,
            }
        }))
        .map_err(internal)?;

        let deadline = Instant::now() + TIME_LIMIT;
        let timed_out = Arc::new(AtomicBool::new(false));
        let flag = timed_out.clone();
        conn.progress_handler(
            1000,
            Some(move || {
                let late = Instant::now() >= deadline;
                if late {
                    flag.store(true, Ordering::Relaxed);
                }
                late
            }),
        )
        .map_err(internal)?;

        let refuse = |e: rusqlite::Error| -> ToolError {
            if timed_out.load(Ordering::Relaxed) {
                return ToolError::Refused(time_limit_message());
            }
            if let Some(reason) = refusal.lock().ok().and_then(|r| r.clone()) {
                return ToolError::Refused(format!("{REFUSED_PREFIX}: {reason}"));
            }
            match e {
                rusqlite::Error::MultipleStatement => ToolError::Refused(format!(
                    "{REFUSED_PREFIX}: send exactly one statement per call"
                )),
                other => ToolError::Refused(format!("the statement failed: {other}")),
            }
        };

        let mut stmt = conn.prepare(sql).map_err(|e| match e {
            // SQLite refuses writes to a view before asking the authorizer.
            rusqlite::Error::SqliteFailure(_, Some(message))
                if message.starts_with("cannot modify") =>
            {
                ToolError::Refused(format!(
                    "{REFUSED_PREFIX}: writes (INSERT, UPDATE, DELETE) are not allowed"
                ))
            }
            other => refuse(other),
        })?;
        if !stmt.readonly() {
            return Err(ToolError::Refused(format!(
                "{REFUSED_PREFIX}: this statement would change data or settings"
            )));
        }
        let columns: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
        if columns.is_empty() {
            return Err(ToolError::Refused(format!(
                "{REFUSED_PREFIX}: this statement returns no rows"
            )));
        }
        // Counts and sums the kept totals hold are read there; the answer keeps the caller's
        // column names. Should the rewritten statement not prepare, the caller's runs.
        if let Some(kept) = query_kept_totals::rewrite(sql, QueryDialect::Sqlite) {
            match conn.prepare(&kept) {
                Ok(kept_stmt) if kept_stmt.column_count() == columns.len() => stmt = kept_stmt,
                Ok(_) => tracing::warn!(sql, kept, "kept-totals rewrite changed the columns"),
                Err(e) => tracing::warn!(sql, kept, "kept-totals rewrite failed: {e}"),
            }
        }
        let mut answer = Answer {
            columns,
            ..Answer::default()
        };
        let mut rows = stmt.query([]).map_err(&refuse)?;
        while let Some(row) = rows.next().map_err(&refuse)? {
            if answer.rows.len() == max_rows {
                answer.truncated = true;
                break;
            }
            let mut values = Vec::with_capacity(answer.columns.len());
            for i in 0..answer.columns.len() {
                values.push(json_value(row.get_ref(i).map_err(&refuse)?));
            }
            answer.rows.push(values);
        }
        Ok(answer)
    }

    /// What the caller's statement may do: select, read base tables through the analytics
    /// views, call functions, recurse. Everything else is refused with the reason.
    fn authorize(ctx: &AuthContext<'_>) -> Result<(), String> {
        let through_view = ctx
            .accessor
            .is_some_and(|v| analytics_views::find(v).is_some());
        match &ctx.action {
            AuthAction::Select | AuthAction::Recursive => Ok(()),
            AuthAction::Read { table_name, .. } => {
                // The views' own columns (in `temp`), base tables only through them, and
                // common table expressions (which belong to no database).
                let is_view = ctx.database_name == Some("temp")
                    && analytics_views::find(table_name).is_some();
                let is_cte = ctx.database_name.is_none();
                let base = matches!(ctx.database_name, Some("main") | Some("ingest"));
                if is_view || is_cte || (through_view && base) {
                    Ok(())
                } else {
                    Err(format!(
                        "`{table_name}` cannot be read; only the analytics views can: {}",
                        analytics_views::names().join(", ")
                    ))
                }
            }
            AuthAction::Function { function_name } => {
                if function_name.eq_ignore_ascii_case("load_extension") {
                    Err("loading extensions is not allowed".into())
                } else {
                    Ok(())
                }
            }
            AuthAction::Pragma { pragma_name, .. } => {
                Err(format!("PRAGMA ({pragma_name}) is not allowed"))
            }
            AuthAction::Attach { .. } => Err("ATTACH is not allowed".into()),
            AuthAction::Detach { .. } => Err("DETACH is not allowed".into()),
            AuthAction::Insert { .. } | AuthAction::Update { .. } | AuthAction::Delete { .. } => {
                Err("writes (INSERT, UPDATE, DELETE) are not allowed".into())
            }
            AuthAction::Transaction { .. } | AuthAction::Savepoint { .. } => {
                Err("transaction control is not allowed".into())
            }
            _ => Err("schema changes and maintenance commands are not allowed".into()),
        }
    }

    fn json_value(value: ValueRef<'_>) -> Value {
        match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => json!(i),
            ValueRef::Real(f) => serde_json::Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => {
                use base64::Engine;
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
        }
    }
}

mod postgres {
    use std::collections::{HashMap, HashSet};

    use sea_orm::sqlx::{
        self,
        pool::PoolConnection,
        postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, Postgres},
        AssertSqlSafe, Column as _, ConnectOptions as _, Connection as _, Executor as _, Row as _,
        SqlSafeStr as _, Statement as _, TypeInfo as _, ValueRef as _,
    };
    use sha2::{Digest, Sha256};

    use super::*;

    /// Where the views live and who may read them, for one data schema.
    #[derive(Clone, Debug)]
    struct Setup {
        views_schema: String,
        role: String,
    }

    /// Data schemas whose views and role this process has checked.
    fn prepared() -> &'static tokio::sync::Mutex<HashSet<String>> {
        static PREPARED: OnceLock<tokio::sync::Mutex<HashSet<String>>> = OnceLock::new();
        PREPARED.get_or_init(|| tokio::sync::Mutex::new(HashSet::new()))
    }

    fn internal(context: &str) -> impl Fn(sea_orm::DbErr) -> ToolError + '_ {
        move |e| {
            if crate::db::is_unavailable(&e) {
                ToolError::from(e)
            } else {
                ToolError::Internal(format!("{context}: {e}"))
            }
        }
    }

    /// A failure of the query role's own connection: 503 when the database cannot be reached.
    fn connection_error(context: &str) -> impl Fn(sqlx::Error) -> ToolError + '_ {
        move |e| {
            if crate::db::is_unavailable_sqlx(&e) {
                ToolError::Unavailable(crate::db::UNAVAILABLE_MESSAGE.into())
            } else {
                ToolError::Internal(format!("{context}: {e}"))
            }
        }
    }

    /// Creates (or updates) the query role, the views schema and its views for the current
    /// data schema, once per process and catalog version; an advisory lock keeps instances
    /// starting together from racing.
    async fn ensure_setup(db: &DatabaseConnection) -> ToolResult<Setup> {
        let row = db
            .query_one_raw(Statement::from_string(
                DatabaseBackend::Postgres,
                "SELECT current_schema() AS s",
            ))
            .await
            .map_err(internal("read the current schema"))?
            .ok_or_else(|| ToolError::Internal("no current schema".into()))?;
        let data_schema: String = row
            .try_get("", "s")
            .map_err(internal("read the current schema"))?;
        let setup = Setup {
            views_schema: format!("{data_schema}_analytics"),
            role: format!("{data_schema}_analytics_reader"),
        };
        let mut done = prepared().lock().await;
        if done.contains(&data_schema) {
            return Ok(setup);
        }
        let views: Vec<String> = analytics_views::VIEWS
            .iter()
            .map(|v| v.postgres_view(&setup.views_schema, &data_schema))
            .collect();
        let version = hex::encode(Sha256::digest(views.join(";").as_bytes()));
        let schema = analytics_views::quote_ident(&setup.views_schema);
        let role = analytics_views::quote_ident(&setup.role);
        let mut script = format!(
            "SELECT pg_advisory_xact_lock(hashtext({lock}));\n\
             DO $$ BEGIN CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE \
             NOINHERIT NOREPLICATION; EXCEPTION WHEN duplicate_object OR unique_violation \
             THEN NULL; END $$;\n",
            lock = analytics_views::quote_literal(&setup.views_schema),
        );
        if let Ok(password) = std::env::var("CUSTINTEL_QUERY_PASSWORD") {
            script.push_str(&format!(
                "ALTER ROLE {role} PASSWORD {};\n",
                analytics_views::quote_literal(&password)
            ));
        }
        let current: Option<String> = db
            .query_one_raw(Statement::from_sql_and_values(
                DatabaseBackend::Postgres,
                "SELECT obj_description(oid, 'pg_namespace') AS v FROM pg_namespace \
                 WHERE nspname = $1",
                [setup.views_schema.clone().into()],
            ))
            .await
            .map_err(internal("read the analytics views' version"))?
            .and_then(|r| r.try_get::<Option<String>>("", "v").ok().flatten());
        if current.as_deref() != Some(version.as_str()) {
            script.push_str(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE;\nCREATE SCHEMA {schema};\n"
            ));
            for view in &views {
                script.push_str(view);
                script.push_str(";\n");
            }
            script.push_str(&format!(
                "COMMENT ON SCHEMA {schema} IS {};\n",
                analytics_views::quote_literal(&version)
            ));
        }
        script.push_str(&format!(
            "REVOKE ALL ON SCHEMA {schema} FROM PUBLIC;\n\
             GRANT USAGE ON SCHEMA {schema} TO {role};\n\
             GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role};\n"
        ));
        // One simple-protocol request runs as one implicit transaction: all or nothing, and
        // the advisory lock is held to its end.
        if let Err(e) = db.execute_unprepared(&script).await {
            if crate::db::is_unavailable(&e) {
                return Err(ToolError::from(e));
            }
            return Err(ToolError::Internal(format!(
                "could not set up the analytics views for svc_query (the database user needs \
                 CREATEROLE to create the query role): {e}"
            )));
        }
        done.insert(data_schema);
        Ok(setup)
    }

    /// Runs `sql` for `organization_id` as the query role.
    pub(super) async fn run(
        db: &DatabaseConnection,
        organization_id: &str,
        sql: &str,
        max_rows: usize,
    ) -> ToolResult<Answer> {
        let setup = ensure_setup(db).await?;
        let mut conn = query_connections(db, &setup)
            .await
            .acquire()
            .await
            .map_err(connection_error("could not connect as the query role"))?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await
            .map_err(connection_error("query connection"))?;
        db.execute_raw(Statement::from_sql_and_values(
            DatabaseBackend::Postgres,
            "INSERT INTO query_sessions (backend_pid, organization_id, created_at) \
             VALUES ($1, $2, now()) ON CONFLICT (backend_pid) DO UPDATE \
             SET organization_id = EXCLUDED.organization_id, created_at = EXCLUDED.created_at",
            [pid.into(), organization_id.into()],
        ))
        .await
        .map_err(internal("register the query session"))?;

        let outcome = tokio::time::timeout(
            TIME_LIMIT + Duration::from_secs(1),
            run_on(&mut conn, sql, max_rows),
        )
        .await;
        let result = match outcome {
            Ok(result) => {
                // Back to the pool as a fresh connection would be, or closed.
                if reset(&mut conn).await.is_err() {
                    let _ = conn.close().await;
                }
                result
            }
            Err(_) => {
                // The server-side timeout should have fired; make sure the backend stops, and
                // do not use this connection again.
                let _ = db
                    .execute_raw(Statement::from_sql_and_values(
                        DatabaseBackend::Postgres,
                        "SELECT pg_cancel_backend($1)",
                        [pid.into()],
                    ))
                    .await;
                let _ = conn.close().await;
                Err(ToolError::Refused(time_limit_message()))
            }
        };
        let _ = db
            .execute_raw(Statement::from_sql_and_values(
                DatabaseBackend::Postgres,
                "DELETE FROM query_sessions WHERE backend_pid = $1 AND organization_id = $2",
                [pid.into(), organization_id.into()],
            ))
            .await;
        result
    }

    /// Query-role connections open at once per data schema, at most.
    const QUERY_CONNECTIONS: u32 = 8;

    /// The query role's connections for one data schema, kept between calls: opening one (a
    /// new server process, TLS, the catalog read again) cost more than most statements, 30-70
    /// ms a call on a loaded two-core machine. [`reset`] returns each to the state of a new
    /// one before another call uses it.
    async fn query_connections(db: &DatabaseConnection, setup: &Setup) -> PgPool {
        static POOLS: OnceLock<tokio::sync::Mutex<HashMap<String, PgPool>>> = OnceLock::new();
        let mut pools = POOLS
            .get_or_init(|| tokio::sync::Mutex::new(HashMap::new()))
            .lock()
            .await;
        let base: PgConnectOptions = (*db.get_postgres_connection_pool().connect_options()).clone();
        // Per server and schema: tests run several databases in one process.
        let key = format!(
            "{}:{}/{}/{}",
            base.get_host(),
            base.get_port(),
            base.get_database().unwrap_or_default(),
            setup.views_schema
        );
        if let Some(pool) = pools.get(&key) {
            return pool.clone();
        }
        let password = std::env::var("CUSTINTEL_QUERY_PASSWORD").unwrap_or_default();
        let port = base.get_port();
        let options = base
            .username(&setup.role)
            .password(&password)
            .options([("search_path", setup.views_schema.as_str())])
            // Kept through `DISCARD ALL`: values given at connection are the session's defaults.
            .options(crate::db::postgres_sockets::server_settings())
            .disable_statement_logging();
        let pool = PgPoolOptions::new()
            .max_connections(QUERY_CONNECTIONS)
            .min_connections(0)
            // Bounded as the service's own connections are: a server that does not answer is
            // unavailable.
            .acquire_timeout(crate::db::POSTGRES_ACQUIRE_TIMEOUT)
            .idle_timeout(Duration::from_secs(60))
            .after_connect(move |_, _| {
                Box::pin(async move {
                    crate::db::postgres_sockets::configure_towards(port);
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        pools.insert(key, pool.clone());
        pool
    }

    /// Ends the caller's transaction (rolled back, which also undoes any `set_config` of it)
    /// and discards whatever else a statement could leave on the session: prepared statements,
    /// advisory locks, cursors, temporary tables.
    async fn reset(conn: &mut PoolConnection<Postgres>) -> Result<(), sqlx::Error> {
        sqlx::raw_sql("ROLLBACK").execute(&mut **conn).await?;
        conn.clear_cached_statements().await?;
        sqlx::raw_sql("DISCARD ALL").execute(&mut **conn).await?;
        Ok(())
    }

    async fn run_on(conn: &mut PgConnection, sql: &str, max_rows: usize) -> ToolResult<Answer> {
        use futures_util::TryStreamExt;

        sqlx::raw_sql(AssertSqlSafe(format!(
            "BEGIN READ ONLY; SET LOCAL statement_timeout = {};",
            TIME_LIMIT.as_millis()
        )))
        .execute(&mut *conn)
        .await
        .map_err(connection_error("query transaction"))?;
        // Preparing checks that `sql` is exactly one statement and names its columns.
        let described = (&mut *conn)
            .prepare(AssertSqlSafe(sql.to_string()).into_sql_str())
            .await
            .map_err(refusal)?;
        let columns: Vec<String> = described
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        if columns.is_empty() {
            // Run it anyway when it is a write, so the refusal says why; else refuse here.
            sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                .execute(&mut *conn)
                .await
                .map_err(refusal)?;
            return Err(ToolError::Refused(format!(
                "{REFUSED_PREFIX}: this statement returns no rows"
            )));
        }
        // Counts and sums the kept totals hold are read there; the answer keeps the caller's
        // column names. Should the rewritten statement not prepare, the caller's runs (a
        // failed prepare inside a transaction would end it: savepoint around it).
        let mut statement = sql.to_string();
        if let Some(kept) = query_kept_totals::rewrite(sql, QueryDialect::Postgres) {
            sqlx::raw_sql("SAVEPOINT kept_totals")
                .execute(&mut *conn)
                .await
                .map_err(connection_error("query transaction"))?;
            let prepared = (&mut *conn)
                .prepare(AssertSqlSafe(kept.clone()).into_sql_str())
                .await;
            match prepared {
                Ok(p) if p.columns().len() == columns.len() => statement = kept,
                Ok(_) => tracing::warn!(sql, kept, "kept-totals rewrite changed the columns"),
                Err(e) if crate::db::is_unavailable_sqlx(&e) => return Err(refusal(e)),
                Err(e) => {
                    tracing::warn!(sql, kept, "kept-totals rewrite failed: {e}");
                    sqlx::raw_sql("ROLLBACK TO SAVEPOINT kept_totals")
                        .execute(&mut *conn)
                        .await
                        .map_err(connection_error("query transaction"))?;
                }
            }
        }
        let mut answer = Answer {
            columns,
            ..Answer::default()
        };
        // The simple protocol returns every value as text, which converts to JSON uniformly.
        let mut rows = sqlx::raw_sql(AssertSqlSafe(statement)).fetch(&mut *conn);
        while let Some(row) = rows.try_next().await.map_err(refusal)? {
            if answer.rows.len() == max_rows {
                answer.truncated = true;
                break;
            }
            let mut values = Vec::with_capacity(row.len());
            for i in 0..row.len() {
                let raw = row
                    .try_get_raw(i)
                    .map_err(|e| ToolError::Internal(format!("read a value: {e}")))?;
                if raw.is_null() {
                    values.push(Value::Null);
                    continue;
                }
                let type_name = raw.type_info().name().to_string();
                let text = raw
                    .as_str()
                    .map_err(|e| ToolError::Internal(format!("read a value: {e}")))?;
                values.push(json_value(&type_name, text));
            }
            answer.rows.push(values);
        }
        Ok(answer)
    }

    fn json_value(type_name: &str, text: &str) -> Value {
        match type_name {
            "BOOL" => Value::Bool(text == "t"),
            "INT2" | "INT4" | "INT8" | "OID" => text
                .parse::<i64>()
                .map(Value::from)
                .unwrap_or_else(|_| Value::String(text.into())),
            "FLOAT4" | "FLOAT8" | "NUMERIC" => {
                if let Ok(i) = text.parse::<i64>() {
                    Value::from(i)
                } else {
                    text.parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map(Value::Number)
                        .unwrap_or_else(|| Value::String(text.into()))
                }
            }
            "JSON" | "JSONB" => {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into()))
            }
            _ => Value::String(text.into()),
        }
    }

    /// A database error as the caller should read it.
    fn refusal(err: sqlx::Error) -> ToolError {
        if crate::db::is_unavailable_sqlx(&err) {
            return connection_error("query failed")(err);
        }
        let sqlx::Error::Database(db_err) = &err else {
            return ToolError::Internal(format!("query failed: {err}"));
        };
        let message = db_err.message();
        match db_err.code().as_deref() {
            Some("25006") => ToolError::Refused(format!(
                "{REFUSED_PREFIX}: writes and schema changes are not allowed ({message})"
            )),
            Some("42501") => ToolError::Refused(format!(
                "{REFUSED_PREFIX}: {message} (the query role may only read the analytics \
                 views: {})",
                analytics_views::names().join(", ")
            )),
            Some("57014") => ToolError::Refused(time_limit_message()),
            Some("42601") if message.contains("multiple commands") => ToolError::Refused(format!(
                "{REFUSED_PREFIX}: send exactly one statement per call"
            )),
            Some("42P01") => ToolError::Refused(format!(
                "{message}; the analytics views are {} (see svc_schema)",
                analytics_views::names().join(", ")
            )),
            _ => ToolError::Refused(format!("the statement failed: {message}")),
        }
    }
}
