//! `custintel import`: JSON Lines in, good lines kept, bad lines reported by number.

use serde_json::{json, Value};

/// Runs `custintel import`, feeding `stdin` when given; (exit code, stdout JSON).
fn import(db_url: &str, org: &str, file: &str, stdin: Option<&str>) -> (i32, Value) {
    crate::helpers::run_cli_json(db_url, &["import", "--org", org, file], stdin)
}

fn create_org(db_url: &str) -> String {
    let out = crate::helpers::custintel_bin()
        .args(["admin", "create-org", "--name", "Importer"])
        .env("DATABASE_URL", db_url)
        .output()
        .expect("create-org");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v["organizationId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn import_command() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/import.db?mode=rwc", tmp.path().display());
    let org = create_org(&url);

    let good = crate::tools::seed_lines();
    let path = tmp.path().join("book.jsonl");
    std::fs::write(&path, &good).unwrap();
    let (code, report) = import(&url, &org, path.to_str().unwrap(), None);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        report,
        json!({"imported": {"customer": 4, "user": 4, "workspace_user": 4, "source": 5, "fact": 4}, "rejected": []})
    );

    // Bad lines are reported with their numbers; good lines around them still land. A
    // re-imported line updates its record.
    let mixed = [
        r#"{"kind":"customer","name":"Acme Corporation","domain":"acme.com","externalId":"cus_1","billingStatus":"CHURNED","mrrCents":0}"#,
        r#"{"kind":"customer","name":"No key"}"#,
        r#"{"kind":"user","customer":"acme.com","email":"eve@acme.com","stage":"famous"}"#,
        "this is not json",
        "",
        r#"{"kind":"invoice","id":"in_1"}"#,
        r#"{"kind":"fact","customer":"acme.com","text":"Orphan","sourceType":"CALL","sourceId":"call_404"}"#,
        r#"{"kind":"user","customer":"acme.com","email":"eve@acme.com","name":"Eve","stage":"engaged","colour":"red"}"#,
        r#"{"kind":"user","customer":"nowhere.com","email":"zed@nowhere.com"}"#,
        r#"{"kind":"user","customer":"acme.com","email":"eve@acme.com","name":"Eve","stage":"engaged"}"#,
    ]
    .join("\n");
    let (code, report) = import(&url, &org, "-", Some(&mixed));
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["imported"],
        json!({"customer": 1, "user": 1, "workspace_user": 0, "source": 0, "fact": 0})
    );
    let lines: Vec<i64> = report["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["line"].as_i64().unwrap())
        .collect();
    assert_eq!(lines, [2, 3, 4, 6, 7, 8, 9]);
    for r in report["rejected"].as_array().unwrap() {
        assert!(!r["error"].as_str().unwrap().is_empty());
    }
    let errors: Vec<&str> = report["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["error"].as_str().unwrap())
        .collect();
    assert!(errors[1].starts_with("stage:"), "{errors:?}");
    assert!(errors[5].contains("colour"), "{errors:?}");
    insta::assert_json_snapshot!("import_rejected", report);

    // Nothing was duplicated: still four customers, Acme renamed and churned.
    let db = custintel::db::connect(&url, None).await.unwrap();
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    let customers = entity::customer::Entity::find()
        .filter(entity::customer::Column::OrganizationId.eq(&org))
        .count(&db)
        .await
        .unwrap();
    assert_eq!(customers, 4);
    let acme = entity::customer::Entity::find()
        .filter(entity::customer::Column::ExternalId.eq("cus_1"))
        .one(&db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (acme.name.as_str(), acme.billing_status.as_str()),
        ("Acme Corporation", "CHURNED")
    );
    // Re-importing the whole file changes nothing in the counts.
    let (code, _) = import(&url, &org, path.to_str().unwrap(), None);
    assert_eq!(code, 0);
    for (count, expected) in [
        (
            entity::user::Entity::find()
                .filter(entity::user::Column::OrganizationId.eq(&org))
                .count(&db)
                .await
                .unwrap(),
            5,
        ),
        (
            entity::source::Entity::find()
                .filter(entity::source::Column::OrganizationId.eq(&org))
                .count(&db)
                .await
                .unwrap(),
            5,
        ),
        (
            entity::fact::Entity::find()
                .filter(entity::fact::Column::OrganizationId.eq(&org))
                .count(&db)
                .await
                .unwrap(),
            4,
        ),
        (
            entity::workspace_user::Entity::find()
                .filter(entity::workspace_user::Column::OrganizationId.eq(&org))
                .count(&db)
                .await
                .unwrap(),
            4,
        ),
    ] {
        assert_eq!(count, expected);
    }

    // An unknown organization is an error, not an import.
    let out = crate::helpers::custintel_bin()
        .args(["import", "--org", "org_missing", path.to_str().unwrap()])
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no organization"));

    // A malformed setting is refused before anything is read.
    let out = crate::helpers::custintel_bin()
        .args(["import", "--org", &org, path.to_str().unwrap()])
        .env("DATABASE_URL", &url)
        .env("CUSTINTEL_IMPORT_CHUNKS_AT_ONCE", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("CUSTINTEL_IMPORT_CHUNKS_AT_ONCE: expected 1 to 16"));
}

// ---------------------------------------------------------------------------------------------
// Chunked import: re-import, email normal form, chunk boundaries, concurrent writers.

use std::collections::{BTreeMap, HashSet};

use custintel::ops::import::{self as importer, ImportReport, CHUNK_LINES};
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, Statement};

use crate::{db_test, helpers::TestApp};

const STATUSES: [&str; 4] = ["PAYING", "TRIALING", "CHURNED", "NONE"];
const STAGES: [&str; 5] = [
    "discovered",
    "signed_up",
    "activated",
    "engaged",
    "inactive",
];

/// A book of `customers` customers, each with two users, a source and a fact, in the order a
/// file would have them (every reference points back). Users of odd customers have emails in
/// mixed case.
fn book(customers: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for c in 0..customers {
        lines.push(
            json!({"kind": "customer", "name": format!("Company {c}"),
            "domain": format!("company-{c}.example.com"), "externalId": format!("cus_{c}"),
            "billingStatus": STATUSES[c % 4], "mrrCents": c})
            .to_string(),
        );
    }
    for c in 0..customers {
        for u in 0..2 {
            let email = if c % 2 == 1 {
                format!("User{u}@Company-{c}.Example.COM")
            } else {
                format!("user{u}@company-{c}.example.com")
            };
            lines.push(
                json!({"kind": "user", "customer": format!("company-{c}.example.com"),
                "email": email, "externalId": format!("u_{c}_{u}"),
                "stage": STAGES[(c + u) % 5]})
                .to_string(),
            );
        }
    }
    for c in 0..customers {
        lines.push(json!({"kind": "source", "sourceType": "CALL", "sourceId": format!("call_{c}"),
            "customer": format!("cus_{c}"), "title": format!("Call {c}"), "body": "about seats",
            "occurredAt": "2026-09-01T10:00:00Z", "permalink": format!("https://crm.example.com/{c}")})
        .to_string());
        lines.push(json!({"kind": "fact", "customer": format!("company-{c}.example.com"),
            "text": format!("Wants {c} seats"), "sourceType": "CALL", "sourceId": format!("call_{c}"),
            "sourceQuote": "seats"})
        .to_string());
    }
    lines
}

/// Imports `lines` through the streaming reader, as `custintel import` does.
async fn import_lines(app: &TestApp, org: &str, lines: &[String]) -> ImportReport {
    let text = lines.join("\n").into_bytes();
    importer::import_reader(
        &app.db,
        org,
        std::io::Cursor::new(text),
        importer::DEFAULT_CHUNKS_AT_ONCE,
    )
    .await
    .expect("import")
}

/// The rows `sql` answers, its one `?` bound to the organization (`$1` on PostgreSQL).
async fn rows_of_org(app: &TestApp, sql: &str, org: &str) -> Vec<sea_orm::QueryResult> {
    let backend = app.db.get_database_backend();
    let sql = match backend {
        sea_orm::DbBackend::Postgres => sql.replace('?', "$1"),
        _ => sql.to_string(),
    };
    app.db
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            sql,
            [org.to_string().into()],
        ))
        .await
        .expect("query")
}

async fn scalar(app: &TestApp, sql: &str, org: &str) -> i64 {
    let rows = rows_of_org(app, sql, org).await;
    rows.first()
        .expect("a row")
        .try_get_by_index::<i64>(0)
        .expect("a number")
}

/// The (text, value) pairs `sql` answers, its one `?` bound to the organization.
pub(crate) async fn pairs_of_org<V: sea_orm::TryGetable>(
    app: &TestApp,
    sql: &str,
    org: &str,
) -> BTreeMap<String, V> {
    rows_of_org(app, sql, org)
        .await
        .iter()
        .map(|r| {
            (
                r.try_get_by_index::<String>(0).expect("text"),
                r.try_get_by_index::<V>(1).expect("value"),
            )
        })
        .collect()
}

/// The organization's kept counts of `record`, bucket by bucket (summed over shards), without
/// the empty ones.
async fn kept_per_bucket(app: &TestApp, org: &str, record: &str) -> BTreeMap<String, i64> {
    pairs_of_org(
        app,
        &format!(
            "SELECT bucket, CAST(SUM(n) AS BIGINT) FROM record_counts \
             WHERE organization_id = ? AND record = '{record}' \
             GROUP BY bucket HAVING SUM(n) <> 0"
        ),
        org,
    )
    .await
}

/// The organization's customers kept per hour and per day of last activity (the triggers')
/// agree with the rows, label by label (computed here from each row's time).
pub(crate) async fn assert_activity_counts(app: &TestApp, org: &str) {
    let rows = entity::customer::Entity::find()
        .filter(entity::customer::Column::OrganizationId.eq(org))
        .all(&app.db)
        .await
        .expect("customers");
    for (record, layout) in [
        ("customer_activity_hours", "%Y-%m-%dT%H"),
        ("customer_activity_days", "%Y-%m-%d"),
    ] {
        let kept = kept_per_bucket(app, org, record).await;
        let mut counted = BTreeMap::new();
        for c in &rows {
            let label = c
                .last_activity_at
                .map_or("never".to_string(), |t| t.format(layout).to_string());
            *counted.entry(label).or_insert(0i64) += 1;
        }
        assert_eq!(kept, counted, "{record}");
    }
}

/// Each customer's kept counts (the triggers') of users, sources and facts per status agree
/// with the rows, and so do the customers' activity counts.
pub(crate) async fn assert_counts_per_customer(app: &TestApp, org: &str) {
    assert_activity_counts(app, org).await;
    for (record, table, bucket) in [
        ("customer_users", "users", "COALESCE(customer_id, '')"),
        ("customer_sources", "sources", "COALESCE(customer_id, '')"),
        ("customer_facts", "facts", "customer_id || ':' || status"),
    ] {
        let kept = kept_per_bucket(app, org, record).await;
        let rows: BTreeMap<String, i64> = pairs_of_org(
            app,
            &format!(
                "SELECT {bucket}, CAST(COUNT(*) AS BIGINT) FROM {table} \
                 WHERE organization_id = ? GROUP BY {bucket}"
            ),
            org,
        )
        .await;
        assert!(!rows.is_empty(), "{table}: no rows to count");
        assert_eq!(kept, rows, "{record}: kept per customer against the rows");
    }
}

/// Ids of a table's rows of one organization, by a key column.
async fn ids_by(app: &TestApp, table: &str, key: &str, org: &str) -> BTreeMap<String, String> {
    let sql = format!("SELECT {key}, id FROM {table} WHERE organization_id = ?");
    pairs_of_org(app, &sql, org).await
}

// A book larger than one chunk lands whole; importing it again updates every record in place
// (same ids, no duplicates), keeps the trigger-maintained counts exact, and appends the
// search index's change feed again for every source and fact.
db_test!(reimport_is_idempotent, |app: TestApp| async move {
    let org = app.org("Book Co").await;
    let o = &org.organization_id;
    let customers = CHUNK_LINES / 2 + 100;
    let lines = book(customers);
    assert!(lines.len() > 2 * CHUNK_LINES);
    let first = import_lines(&app, o, &lines).await;
    assert!(
        first.rejected.is_empty(),
        "{:?}",
        &first.rejected[..3.min(first.rejected.len())]
    );
    let n = customers as u64;
    let expected =
        json!({"customer": n, "user": 2 * n, "workspace_user": 0, "source": n, "fact": n});
    assert_eq!(serde_json::to_value(&first.imported).unwrap(), expected);
    let customer_ids = ids_by(&app, "customers", "external_id", o).await;
    let user_ids = ids_by(&app, "users", "external_id", o).await;
    let source_ids = ids_by(&app, "sources", "source_id", o).await;
    assert_eq!(customer_ids.len(), customers);
    assert_eq!(user_ids.len(), 2 * customers);
    let changes = scalar(
        &app,
        "SELECT count(*) FROM change_log WHERE organization_id = ?",
        o,
    )
    .await;
    assert_eq!(changes, 2 * customers as i64);

    let again = import_lines(&app, o, &lines).await;
    assert!(again.rejected.is_empty());
    assert_eq!(serde_json::to_value(&again.imported).unwrap(), expected);
    assert_eq!(
        ids_by(&app, "customers", "external_id", o).await,
        customer_ids
    );
    assert_eq!(ids_by(&app, "users", "external_id", o).await, user_ids);
    assert_eq!(ids_by(&app, "sources", "source_id", o).await, source_ids);
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM facts WHERE organization_id = ?",
            o
        )
        .await,
        customers as i64
    );
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM change_log WHERE organization_id = ?",
            o
        )
        .await,
        4 * customers as i64
    );
    // Every source and fact carries the sequence number of its latest change feed row.
    for table in ["sources", "facts"] {
        let stale = scalar(
            &app,
            &format!(
                "SELECT count(*) FROM {table} t WHERE t.organization_id = ? AND t.change_seq <> \
                 (SELECT max(seq) FROM change_log c WHERE c.artifact_id = t.id)"
            ),
            o,
        )
        .await;
        assert_eq!(stale, 0, "{table} with a stale change_seq");
    }
    // The kept counts (triggers) agree with the rows.
    for (record, table, column) in [
        ("users", "users", "stage"),
        ("customers", "customers", "billing_status"),
    ] {
        let kept = scalar(
            &app,
            &format!(
                "SELECT CAST(coalesce(sum(n), 0) AS BIGINT) FROM record_counts WHERE organization_id = ? \
                 AND record = '{record}'"
            ),
            o,
        )
        .await;
        let rows = scalar(
            &app,
            &format!("SELECT count(*) FROM {table} WHERE organization_id = ?"),
            o,
        )
        .await;
        assert_eq!(kept, rows, "{record} kept count");
        let mismatched = scalar(
            &app,
            &format!(
                "SELECT count(*) FROM (SELECT organization_id, bucket, SUM(n) AS n \
                 FROM record_counts WHERE organization_id = ? AND record = '{record}' \
                 GROUP BY organization_id, bucket) k WHERE k.n <> (SELECT count(*) FROM {table} t \
                 WHERE t.organization_id = k.organization_id AND t.{column} = k.bucket)"
            ),
            o,
        )
        .await;
        assert_eq!(mismatched, 0, "{record} kept counts per bucket");
    }
    assert_counts_per_customer(&app, o).await;
    // Imported emails are stored in their normal form.
    let mixed = scalar(
        &app,
        "SELECT count(*) FROM users WHERE organization_id = ? AND email <> lower(email)",
        o,
    )
    .await;
    assert_eq!(mixed, 0);
});

// One user, however its email is spelled: mixed-case and padded emails find the stored user,
// in the same chunk, in a later chunk and in a later import, and `svc_list_users`' `email`
// filter finds it in any case.
db_test!(
    mixed_case_emails_match_one_user,
    |app: TestApp| async move {
        let org = app.org("Case Co").await;
        let o = &org.organization_id;
        let mut lines = vec![
        json!({"kind": "customer", "name": "Acme", "domain": "acme.com"}).to_string(),
        json!({"kind": "user", "customer": "acme.com", "email": "Ada.Lovelace@Acme.com", "name": "Ada"})
            .to_string(),
        json!({"kind": "user", "email": "  ADA.LOVELACE@acme.COM ", "stage": "activated"})
            .to_string(),
        json!({"kind": "workspace_user", "name": "Sam", "email": "Sam@OurCo.com", "role": "CSM"})
            .to_string(),
    ];
        // Padding fills the first chunk; the next lines land in the second one.
        for i in lines.len()..CHUNK_LINES {
            lines.push(
                json!({"kind": "customer", "externalId": format!("pad_{i}"), "name": "Pad"})
                    .to_string(),
            );
        }
        lines.push(
            json!({"kind": "user", "email": "ada.lovelace@ACME.com", "name": "Ada Lovelace"})
                .to_string(),
        );
        lines.push(
        json!({"kind": "workspace_user", "name": "Sam Lee", "email": "sam@ourco.COM", "role": "MANAGER"})
            .to_string(),
    );
        let report = import_lines(&app, o, &lines).await;
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        assert_eq!(report.imported.user, 3);
        let again = importer::import_text(
            &app.db,
            o,
            &json!({"kind": "user", "email": "ADA.LOVELACE@ACME.COM", "stage": "engaged"})
                .to_string(),
        )
        .await
        .expect("import");
        assert!(again.rejected.is_empty());

        let users = entity::user::Entity::find()
            .filter(entity::user::Column::OrganizationId.eq(o))
            .all(&app.db)
            .await
            .unwrap();
        assert_eq!(users.len(), 1, "{users:?}");
        let ada = &users[0];
        assert_eq!(ada.email.as_deref(), Some("ada.lovelace@acme.com"));
        assert_eq!(ada.name.as_deref(), Some("Ada Lovelace"));
        assert_eq!(ada.stage, "engaged");
        assert!(ada.customer_id.is_some());
        let staff = entity::workspace_user::Entity::find()
            .filter(entity::workspace_user::Column::OrganizationId.eq(o))
            .all(&app.db)
            .await
            .unwrap();
        assert_eq!(staff.len(), 1);
        assert_eq!(
            (
                staff[0].email.as_str(),
                staff[0].name.as_str(),
                staff[0].role.as_str()
            ),
            ("sam@ourco.com", "Sam Lee", "MANAGER")
        );

        for spelled in ["ADA.LOVELACE@ACME.COM", " ada.lovelace@acme.com "] {
            let r = crate::tools::tool(
                &app,
                &org.api_key,
                "svc_list_users",
                json!({"email": spelled}),
            )
            .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            assert_eq!(crate::tools::field(&r, "id"), [ada.id.clone()], "{spelled}");
        }
        let r = crate::tools::tool(
            &app,
            &org.api_key,
            "svc_list_workspace_users",
            json!({"email": "SAM@ourco.com"}),
        )
        .await;
        assert_eq!(crate::tools::field(&r, "email"), ["sam@ourco.com"]);

        // Another organization's users are not found by the same email.
        let other = app.org("Other Co").await;
        let r = crate::tools::tool(
            &app,
            &other.api_key,
            "svc_list_users",
            json!({"email": "ada.lovelace@acme.com"}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(crate::tools::field(&r, "id").is_empty());
    }
);

// Bad lines on both sides of a chunk boundary are rejected with their numbers; every good line
// lands, including lines that refer to records created just before the boundary, and lines
// after a bad line in the same chunk.
db_test!(
    rejections_across_a_chunk_boundary,
    |app: TestApp| async move {
        let org = app.org("Boundary Co").await;
        let o = &org.organization_id;
        let mut lines = Vec::new();
        let mut bad = Vec::new();
        let mut good_customers = 0u64;
        let mut good_users = 0u64;
        // Line numbers are 1-based; the boundary falls after line CHUNK_LINES.
        while lines.len() < CHUNK_LINES + 10 {
            let n = lines.len() + 1;
            if [CHUNK_LINES - 1, CHUNK_LINES + 1, CHUNK_LINES + 3].contains(&n) {
                lines.push(json!({"kind": "user", "email": "no-at-sign"}).to_string());
                bad.push(n);
            } else if n == CHUNK_LINES + 2 {
                lines.push("{not json".to_string());
                bad.push(n);
            } else if n == CHUNK_LINES + 4 {
                // Refers to the customer of the last line of the first chunk.
                lines.push(
                    json!({"kind": "user", "customer": "last.example.com",
                "email": "first@last.example.com"})
                    .to_string(),
                );
                good_users += 1;
            } else if n == CHUNK_LINES + 5 {
                // Refers to a customer that does not exist.
                lines.push(
                    json!({"kind": "user", "customer": "nowhere.example.com", "email": "x@y.z"})
                        .to_string(),
                );
                bad.push(n);
            } else if n == CHUNK_LINES {
                lines.push(
                    json!({"kind": "customer", "domain": "last.example.com", "name": "Last"})
                        .to_string(),
                );
                good_customers += 1;
            } else {
                lines.push(json!({"kind": "customer", "externalId": format!("c_{n}")}).to_string());
                good_customers += 1;
            }
        }
        let report = import_lines(&app, o, &lines).await;
        let rejected: Vec<usize> = report.rejected.iter().map(|r| r.line).collect();
        assert_eq!(rejected, bad);
        assert_eq!(report.imported.customer, good_customers);
        assert_eq!(report.imported.user, good_users);
        assert!(
            report.rejected[0].error.starts_with("email:"),
            "{:?}",
            report.rejected
        );
        assert!(
            report.rejected[2].error.starts_with("not a JSON object"),
            "{:?}",
            report.rejected
        );
        assert!(report.rejected[4].error.contains("nowhere.example.com"));
        let customers = entity::customer::Entity::find()
            .filter(entity::customer::Column::OrganizationId.eq(o))
            .count(&app.db)
            .await
            .unwrap();
        assert_eq!(customers, good_customers);
        let first = entity::user::Entity::find()
            .filter(entity::user::Column::OrganizationId.eq(o))
            .filter(entity::user::Column::Email.eq("first@last.example.com"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("the user after the boundary");
        let last = entity::customer::Entity::find()
            .filter(entity::customer::Column::Domain.eq("last.example.com"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("the customer before the boundary");
        assert_eq!(first.customer_id.as_deref(), Some(last.id.as_str()));
    }
);

// A line the database refuses (PostgreSQL takes no NUL character in text; SQLite does) costs
// only that line: the chunk is written again line by line.
db_test!(a_line_the_database_refuses, |app: TestApp| async move {
    let org = app.org("Nul Co").await;
    let o = &org.organization_id;
    let lines = vec![
        json!({"kind": "customer", "domain": "a.example.com"}).to_string(),
        json!({"kind": "customer", "domain": "b.example.com", "name": "B\u{0}B"}).to_string(),
        json!({"kind": "user", "customer": "a.example.com", "email": "u@a.example.com"})
            .to_string(),
    ];
    let report = import_lines(&app, o, &lines).await;
    let postgres = app.db.get_database_backend() == sea_orm::DbBackend::Postgres;
    if postgres {
        assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
        assert_eq!(report.rejected[0].line, 2);
        assert!(
            report.rejected[0].error.starts_with("could not be stored:"),
            "{:?}",
            report.rejected
        );
        assert_eq!(report.imported.customer, 1);
    } else {
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        assert_eq!(report.imported.customer, 2);
    }
    assert_eq!(report.imported.user, 1);
});

// A line may not reach another organization's records: a customer id of another organization
// is no reference, and the same keys in two organizations are two records.
db_test!(
    import_stays_in_its_organization,
    |app: TestApp| async move {
        let a = app.org("A Co").await;
        let b = app.org("B Co").await;
        let lines = vec![
        json!({"kind": "customer", "domain": "shared.example.com", "externalId": "cus_shared", "name": "A's"})
            .to_string(),
        json!({"kind": "user", "customer": "shared.example.com", "email": "ada@shared.example.com", "externalId": "u_1"})
            .to_string(),
    ];
        let report = import_lines(&app, &a.organization_id, &lines).await;
        assert!(report.rejected.is_empty());
        let a_customer = entity::customer::Entity::find()
            .filter(entity::customer::Column::OrganizationId.eq(&a.organization_id))
            .one(&app.db)
            .await
            .unwrap()
            .expect("A's customer");
        let foreign = vec![
            json!({"kind": "user", "customer": a_customer.id, "email": "eve@b.example.com"})
                .to_string(),
            json!({"kind": "customer", "domain": "shared.example.com", "name": "B's"}).to_string(),
            json!({"kind": "user", "email": "ADA@shared.example.com", "name": "B's Ada"})
                .to_string(),
        ];
        let report = import_lines(&app, &b.organization_id, &foreign).await;
        assert_eq!(
            report.rejected.iter().map(|r| r.line).collect::<Vec<_>>(),
            [1]
        );
        let a_customer_after = entity::customer::Entity::find_by_id(a_customer.id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(a_customer_after.name, "A's");
        let a_users = entity::user::Entity::find()
            .filter(entity::user::Column::OrganizationId.eq(&a.organization_id))
            .all(&app.db)
            .await
            .unwrap();
        assert_eq!(a_users.len(), 1);
        assert_eq!(a_users[0].name, None);
        let b_users = entity::user::Entity::find()
            .filter(entity::user::Column::OrganizationId.eq(&b.organization_id))
            .count(&app.db)
            .await
            .unwrap();
        assert_eq!(b_users, 1);
    }
);

// A reference to a customer resolves by domain (in any case), then externalId, then id, and
// never to another organization's customer: the same whether or not the chunk holds a
// customer line (with one, whole rows are read by every key; without, ids and keys alone).
db_test!(
    references_resolve_by_domain_then_external_id_then_id,
    |app: TestApp| async move {
        let a = app.org("Refs Co").await;
        let b = app.org("Other Refs Co").await;
        let o = &a.organization_id;
        let customers = vec![
            json!({"kind": "customer", "name": "One", "domain": "one.example.com", "externalId": "cus_1"})
                .to_string(),
            // Its externalId is the other's domain: the domain wins.
            json!({"kind": "customer", "name": "Two", "domain": "two.example.com", "externalId": "one.example.com"})
                .to_string(),
        ];
        assert!(import_lines(&app, o, &customers).await.rejected.is_empty());
        let foreign =
            vec![json!({"kind": "customer", "name": "B", "domain": "b.example.com"}).to_string()];
        assert!(import_lines(&app, &b.organization_id, &foreign)
            .await
            .rejected
            .is_empty());
        let by_domain = ids_by(&app, "customers", "domain", o).await;
        let (one, two) = (&by_domain["one.example.com"], &by_domain["two.example.com"]);
        let foreign_id =
            ids_by(&app, "customers", "domain", &b.organization_id).await["b.example.com"].clone();
        let references = [
            ("ONE.Example.com", Some(one)),
            ("cus_1", Some(one)),
            (two.as_str(), Some(two)),
            ("one.example.com", Some(one)),
            (foreign_id.as_str(), None),
            ("nobody.example.com", None),
        ];
        for with_customer_line in [false, true] {
            let mut lines = Vec::new();
            if with_customer_line {
                lines.push(
                    json!({"kind": "customer", "name": "Three", "domain": "three.example.com"})
                        .to_string(),
                );
            }
            for (n, (reference, _)) in references.iter().enumerate() {
                lines.push(
                    json!({"kind": "user", "customer": reference,
                           "externalId": format!("u_{with_customer_line}_{n}")})
                    .to_string(),
                );
            }
            let report = import_lines(&app, o, &lines).await;
            let first = usize::from(with_customer_line) + 1;
            let rejected: Vec<usize> = report.rejected.iter().map(|r| r.line).collect();
            assert_eq!(rejected, [first + 4, first + 5], "{:?}", report.rejected);
            let users = entity::user::Entity::find()
                .filter(entity::user::Column::OrganizationId.eq(o))
                .all(&app.db)
                .await
                .unwrap();
            for (n, (reference, expected)) in references.iter().enumerate() {
                let external_id = format!("u_{with_customer_line}_{n}");
                let user = users
                    .iter()
                    .find(|u| u.external_id.as_deref() == Some(external_id.as_str()));
                assert_eq!(
                    user.and_then(|u| u.customer_id.as_ref()),
                    *expected,
                    "{reference} (chunk with a customer line: {with_customer_line})"
                );
            }
        }
    }
);

/// What the clients beside an import were told.
#[derive(Default)]
struct Acked {
    signals: Vec<String>,
    message_ids: Vec<String>,
    server_errors: Vec<String>,
    answers: usize,
}

// An import runs while 8 clients write through the HTTP API of a server on the same database:
// no client sees a 5xx, every acknowledged write is stored, and the import is complete.
db_test!(
    import_beside_concurrent_writers,
    |app: TestApp| async move {
        const CLIENTS: usize = 8;
        const MAX_ROUNDS: usize = 60;
        let org = custintel::ops::admin::create_org(
            &app.db,
            custintel::ops::admin::NewOrganization {
                name: "Busy Co".into(),
                plan: custintel::ops::admin::Plan::Pro,
                api_call_limit: None,
                connection_limit: None,
                ingest_rate_limit: Some(100_000),
                tracking_domains: vec![],
            },
        )
        .await
        .expect("org");
        let o = org.organization_id.clone();
        let customers = 2 * CHUNK_LINES;
        let lines = book(customers);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut clients = Vec::new();
        for c in 0..CLIENTS {
            let (base, key, public_key, done) = (
                app.base.clone(),
                org.api_key.clone(),
                org.public_key.clone(),
                done.clone(),
            );
            clients.push(tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut acked = Acked::default();
                for round in 0..MAX_ROUNDS {
                    if round > 0 && done.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let tag = format!("c{c}r{round}");
                    let resp = http
                        .post(format!("{base}/api/signals"))
                        .bearer_auth(&key)
                        .json(
                            &json!({"kind": "EVENT_MATCH", "name": format!("Signal {tag}"),
                        "definition": {"grain": "user", "subjectResolver": "email",
                        "eventNames": [format!("ev_{tag}")], "propertyConditions": [],
                        "conditionMode": "ALL"}}),
                        )
                        .send()
                        .await
                        .expect("signal request");
                    let status = resp.status();
                    let body: Value = resp.json().await.unwrap_or(Value::Null);
                    acked.answers += 1;
                    if status.is_server_error() {
                        acked.server_errors.push(format!("signal {status}: {body}"));
                    } else if let Some(id) = body["result"]["data"]["signal"]["id"].as_str() {
                        acked.signals.push(id.to_string());
                    }
                    let ids: Vec<String> =
                        (0..5).map(|_| uuid::Uuid::new_v4().to_string()).collect();
                    let events: Vec<Value> = ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| {
                        // Ingest writes users by email too: some collide with the book's. The
                        // first event names its user, as the import writes names beside it.
                        let email = format!("user{}@company-{}.example.com", i % 2, c);
                        if i == 0 {
                            json!({"type": "identify", "url": "server://busy", "path": "/",
                                "email": email, "traits": {"name": format!("Busy Person {c}")},
                                "messageId": id})
                        } else {
                            json!({"type": "custom", "eventName": "busy", "url": "server://busy",
                                "path": "/", "email": email, "messageId": id})
                        }
                    })
                    .collect();
                    let resp = http
                        .post(format!("{base}/api/i/v1/{public_key}/events"))
                        .json(&json!({"source": "server", "events": events}))
                        .send()
                        .await
                        .expect("ingest request");
                    let status = resp.status();
                    acked.answers += 1;
                    if status.is_server_error() {
                        acked.server_errors.push(format!(
                            "ingest {status}: {}",
                            resp.text().await.unwrap_or_default()
                        ));
                    } else if status == StatusCode::OK {
                        acked.message_ids.extend(ids);
                    }
                }
                acked
            }));
        }
        let report = import_lines(&app, &o, &lines).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut all = Acked::default();
        for c in clients {
            let a = c.await.expect("client");
            all.signals.extend(a.signals);
            all.message_ids.extend(a.message_ids);
            all.server_errors.extend(a.server_errors);
            all.answers += a.answers;
        }
        assert!(
            all.server_errors.is_empty(),
            "{} of {} answers were 5xx: {:?}",
            all.server_errors.len(),
            all.answers,
            &all.server_errors[..all.server_errors.len().min(5)]
        );
        assert!(
            report.rejected.is_empty(),
            "{:?}",
            &report.rejected[..report.rejected.len().min(5)]
        );
        let n = customers as u64;
        assert_eq!(
            serde_json::to_value(&report.imported).unwrap(),
            json!({"customer": n, "user": 2 * n, "workspace_user": 0, "source": n, "fact": n})
        );
        assert!(
            all.signals.len() >= CLIENTS,
            "every client wrote at least once"
        );
        let stored_signals = entity::signal::Entity::find()
            .filter(entity::signal::Column::OrganizationId.eq(&o))
            .all(&app.db)
            .await
            .unwrap();
        let stored_signals: HashSet<String> = stored_signals.into_iter().map(|s| s.id).collect();
        for id in &all.signals {
            assert!(
                stored_signals.contains(id),
                "acknowledged signal {id} is stored"
            );
        }
        // Ingest acknowledges once a batch is journaled and stores its events behind that:
        // every acknowledged event must be stored within a bounded time.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let mut stored_events = 0;
            for chunk in all.message_ids.chunks(200) {
                stored_events += entity::event::Entity::find()
                    .filter(entity::event::Column::OrganizationId.eq(&o))
                    .filter(entity::event::Column::MessageId.is_in(chunk.iter().cloned()))
                    .count(&app.db)
                    .await
                    .unwrap();
            }
            if stored_events as usize == all.message_ids.len()
                || std::time::Instant::now() > deadline
            {
                assert_eq!(stored_events as usize, all.message_ids.len());
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        // Names written by the import and by ingest at once are found by name.
        let last = format!("Company {}", customers - 1);
        let r = crate::tools::tool(
            &app,
            &org.api_key,
            "svc_list_customers",
            json!({"name": last.to_lowercase()}),
        )
        .await;
        assert_eq!(
            crate::tools::field(&r, "name"),
            [last.as_str()],
            "{}",
            r.body
        );
        for c in 0..CLIENTS {
            let name = format!("Busy Person {c}");
            let r = crate::tools::tool(
                &app,
                &org.api_key,
                "svc_list_users",
                json!({"name": name.to_lowercase()}),
            )
            .await;
            assert_eq!(
                crate::tools::field(&r, "name"),
                [name.as_str()],
                "{}",
                r.body
            );
        }
        // The book's customers, sources and facts are all there, once (ingest adds users only).
        for (table, expected) in [
            ("customers", customers),
            ("sources", customers),
            ("facts", customers),
        ] {
            let found = scalar(
                &app,
                &format!("SELECT count(*) FROM {table} WHERE organization_id = ?"),
                &o,
            )
            .await;
            assert_eq!(found, expected as i64, "{table}");
        }
        // Ingest and the import found and created users by the same emails at once: one each.
        let doubled = scalar(
            &app,
            "SELECT count(*) FROM (SELECT email FROM users WHERE organization_id = ? \
             AND email IS NOT NULL GROUP BY email HAVING count(*) > 1) doubled",
            &o,
        )
        .await;
        assert_eq!(doubled, 0, "emails with more than one user");
        // Each customer's kept counts followed the import's chunks and ingest's users at once.
        assert_counts_per_customer(&app, &o).await;
    }
);

/// Database of `backend` migrated up to (not including) the email normal form migration;
/// `None` when PostgreSQL is not configured.
async fn before_email_normal_form(
    backend: crate::helpers::Backend,
) -> Option<(sea_orm::DatabaseConnection, Option<tempfile::TempDir>)> {
    use migration::MigratorTrait;
    let (db, tmp) = match backend {
        crate::helpers::Backend::Sqlite => {
            let tmp = tempfile::tempdir().expect("tempdir");
            let url = format!("sqlite://{}/m.db?mode=rwc", tmp.path().display());
            (
                custintel::db::connect(&url, None).await.expect("sqlite"),
                Some(tmp),
            )
        }
        crate::helpers::Backend::Postgres => {
            let url = std::env::var("TEST_DATABASE_URL").ok()?;
            let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
            custintel::db::connect(&url, None)
                .await
                .expect("postgres")
                .execute_unprepared(&format!("CREATE SCHEMA {schema}"))
                .await
                .expect("schema");
            (
                custintel::db::connect(&url, Some(&schema))
                    .await
                    .expect("postgres"),
                None,
            )
        }
    };
    let before = migration::Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m20261124_010000_email_normal_form")
        .expect("the migration is registered");
    migration::Migrator::up(&db, Some(before as u32))
        .await
        .expect("earlier migrations");
    Some((db, tmp))
}

/// Stored emails in mixed case and with padding become the normal form; workspace users that
/// collapse onto one email keep the oldest row; users that collapse all stay (only the email
/// changes); another organization's rows are their own.
async fn email_normal_form_migration(backend: crate::helpers::Backend) {
    use chrono::{Duration, Utc};
    use sea_orm::{ActiveModelTrait, Set};
    let Some((db, _tmp)) = before_email_normal_form(backend).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let now = Utc::now();
    let user = |id: &str, org: &str, email: Option<&str>| entity::user::ActiveModel {
        id: Set(id.into()),
        organization_id: Set(org.into()),
        customer_id: Set(None),
        email: Set(email.map(str::to_string)),
        external_id: Set(None),
        name: Set(None),
        stage: Set("discovered".into()),
        traits: Set(json!({})),
        last_activity_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    };
    for (id, org, email) in [
        ("u1", "org_a", Some(" Ada@Acme.COM ")),
        ("u2", "org_a", Some("ada@acme.com")),
        ("u3", "org_a", Some("   ")),
        ("u4", "org_a", None),
        ("u5", "org_b", Some("ADA@ACME.COM")),
        ("u6", "org_a", Some("Émile@Exemple.fr")),
    ] {
        user(id, org, email).insert(&db).await.expect("user");
    }
    let staff = |id: &str, org: &str, email: &str, age: i64| entity::workspace_user::ActiveModel {
        id: Set(id.into()),
        organization_id: Set(org.into()),
        name: Set(format!("Staff {id}")),
        email: Set(email.into()),
        role: Set("CSM".into()),
        created_at: Set(now - Duration::days(age)),
    };
    for (id, org, email, age) in [
        ("w1", "org_a", "sam@ourco.com", 1),
        ("w2", "org_a", "Sam@OurCo.com", 5),
        ("w3", "org_a", "SAM@ourco.com ", 3),
        ("w4", "org_b", "Sam@OurCo.com", 1),
        ("w5", "org_a", "mia@ourco.com", 1),
    ] {
        staff(id, org, email, age)
            .insert(&db)
            .await
            .expect("workspace user");
    }

    custintel::db::migrate(&db).await.expect("migrate");

    let users: BTreeMap<String, Option<String>> = entity::user::Entity::find()
        .all(&db)
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.id, u.email))
        .collect();
    let expected: BTreeMap<String, Option<String>> = [
        ("u1", Some("ada@acme.com")),
        ("u2", Some("ada@acme.com")),
        ("u3", None),
        ("u4", None),
        ("u5", Some("ada@acme.com")),
        ("u6", Some("émile@exemple.fr")),
    ]
    .into_iter()
    .map(|(id, e)| (id.to_string(), e.map(str::to_string)))
    .collect();
    assert_eq!(users, expected);
    let staff: BTreeMap<String, (String, String)> = entity::workspace_user::Entity::find()
        .all(&db)
        .await
        .unwrap()
        .into_iter()
        .map(|w| (w.id, (w.organization_id, w.email)))
        .collect();
    let expected: BTreeMap<String, (String, String)> = [
        ("w2", "org_a", "sam@ourco.com"),
        ("w4", "org_b", "sam@ourco.com"),
        ("w5", "org_a", "mia@ourco.com"),
    ]
    .into_iter()
    .map(|(id, o, e)| (id.to_string(), (o.to_string(), e.to_string())))
    .collect();
    assert_eq!(staff, expected);
}

mod email_normal_form {
    #[tokio::test]
    async fn sqlite() {
        super::email_normal_form_migration(crate::helpers::Backend::Sqlite).await;
    }

    #[tokio::test]
    async fn postgres() {
        super::email_normal_form_migration(crate::helpers::Backend::Postgres).await;
    }
}

// After an import the tables it filled have planner statistics (DESIGN.md "Reads at scale"):
// PostgreSQL's `pg_stats`, SQLite's `sqlite_stat1`.
db_test!(
    an_import_leaves_planner_statistics,
    |app: TestApp| async move {
        let org = app.org("Stats Co").await;
        let report = import_lines(&app, &org.organization_id, &book(30)).await;
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        let backend = app.db.get_database_backend();
        for table in ["customers", "users", "sources", "facts"] {
            let sql = if backend == sea_orm::DbBackend::Postgres {
                format!(
                    "SELECT COUNT(*) FROM pg_stats WHERE schemaname = current_schema() \
                     AND tablename = '{table}'"
                )
            } else {
                format!("SELECT COUNT(*) FROM sqlite_stat1 WHERE tbl = '{table}'")
            };
            let row = app
                .db
                .query_one_raw(Statement::from_string(backend, sql))
                .await
                .expect("query")
                .expect("a row");
            let n: i64 = row.try_get_by_index(0).expect("a number");
            assert!(n > 0, "no planner statistics for {table}");
        }
        // PostgreSQL: vacuumed too, so that index-only scans need not visit the rows.
        if backend == sea_orm::DbBackend::Postgres {
            for table in ["customers", "users", "sources", "facts", "trait_values"] {
                let row = app
                    .db
                    .query_one_raw(Statement::from_string(
                        backend,
                        format!(
                            "SELECT COUNT(*) FROM pg_stat_user_tables WHERE schemaname = \
                             current_schema() AND relname = '{table}' AND last_vacuum IS NOT NULL"
                        ),
                    ))
                    .await
                    .expect("query")
                    .expect("a row");
                let n: i64 = row.try_get_by_index(0).expect("a number");
                assert_eq!(n, 1, "{table} was not vacuumed");
            }
        }
    }
);

/// Every record of an organization as text without ids or times, sorted: two imports that
/// left the same records compare equal.
async fn records_of(app: &TestApp, org: &str) -> Vec<String> {
    let queries = [
        "SELECT 'customer ' || COALESCE(external_id, '-') || ' ' || COALESCE(domain, '-') \
             || ' ' || COALESCE(name, '-') || ' ' || COALESCE(billing_status, '-') || ' ' \
             || COALESCE(CAST(mrr_cents AS TEXT), '-') \
             FROM customers WHERE organization_id = ?",
        "SELECT 'user ' || COALESCE(u.external_id, '-') || ' ' || COALESCE(u.email, '-') \
             || ' ' || COALESCE(u.name, '-') || ' ' || COALESCE(u.stage, '-') || ' ' \
             || COALESCE(c.domain, '-') \
             FROM users u LEFT JOIN customers c ON c.id = u.customer_id \
             WHERE u.organization_id = ?",
        "SELECT 'source ' || s.source_type || ' ' || s.source_id || ' ' || s.title || ' ' \
             || COALESCE(c.external_id, '-') FROM sources s \
             LEFT JOIN customers c ON c.id = s.customer_id WHERE s.organization_id = ?",
        "SELECT 'fact ' || f.text || ' ' || f.source_type || ' ' || f.source_id || ' ' \
             || COALESCE(c.external_id, '-') FROM facts f \
             LEFT JOIN customers c ON c.id = f.customer_id WHERE f.organization_id = ?",
    ];
    let mut records = Vec::new();
    for sql in queries {
        records.extend(
            rows_of_org(app, sql, org)
                .await
                .iter()
                .map(|r| r.try_get_by_index::<String>(0).expect("text")),
        );
    }
    records.sort();
    records
}

/// A book of a few chunks whose lines lean on earlier chunks in every way a chunk written
/// beside another could get wrong: users of customers created a chunk before, users renamed
/// (found by externalId, given a new email) and then new users under their old emails, a
/// customer's domain changed and then named by its new and its old domain, sources updated,
/// facts whose evidence is a source of an earlier chunk; and chunks that lean on nothing
/// before them, which PostgreSQL writes at once.
fn book_leaning_on_earlier_chunks() -> Vec<String> {
    let n = CHUNK_LINES;
    let mut lines = Vec::new();
    let customer = |i: usize| format!("k{i}.example.com");
    for i in 0..n {
        lines.push(
            json!({"kind": "customer", "name": format!("K {i}"), "domain": customer(i),
                "externalId": format!("kx_{i}")})
            .to_string(),
        );
    }
    // Two chunks of new users: the first leans on the customers, the second on nothing new.
    for i in 0..2 * n {
        lines.push(
            json!({"kind": "user", "customer": customer(i % n), "email": format!("b{i}@example.com"),
                "externalId": format!("ub_{i}"), "stage": STAGES[i % 5]})
            .to_string(),
        );
    }
    // Renames: half a chunk of users of the second user chunk get new emails; a customer gets a
    // new domain; sources to fill the chunk.
    for i in n..n + n / 2 - 1 {
        lines.push(
            json!({"kind": "user", "externalId": format!("ub_{i}"),
                "email": format!("renamed{i}@example.com")})
            .to_string(),
        );
    }
    lines.push(
        json!({"kind": "customer", "externalId": "kx_7", "domain": "moved.example.com"})
            .to_string(),
    );
    for i in 0..n / 2 {
        lines.push(
            json!({"kind": "source", "sourceType": "CALL", "sourceId": format!("call_{i}"),
                "customer": format!("kx_{}", i % n), "title": format!("Call {i}"),
                "occurredAt": "2026-09-01T10:00:00Z"})
            .to_string(),
        );
    }
    // The next chunk leans on the one before only through keys that chunk changed: the old
    // emails again (new users now), the customer by its old domain; and new users beside them.
    for i in n..n + n / 4 {
        lines.push(
            json!({"kind": "user", "email": format!("b{i}@example.com"), "name": "Newcomer",
                "customer": "k9.example.com"})
            .to_string(),
        );
    }
    lines.push(
        json!({"kind": "user", "email": "mover@example.com", "customer": "k7.example.com"})
            .to_string(),
    );
    for i in 0..n - n / 4 - 1 {
        lines.push(
            json!({"kind": "user", "email": format!("fill{i}@example.com"),
                "customer": format!("kx_{}", 10 + i % 900)})
            .to_string(),
        );
    }
    // Then the sources updated, facts on them.
    for i in 0..n / 4 {
        lines.push(
            json!({"kind": "source", "sourceType": "CALL", "sourceId": format!("call_{i}"),
                "customer": format!("kx_{}", i + 1), "title": format!("Call {i}, again"),
                "occurredAt": "2026-09-02T10:00:00Z"})
            .to_string(),
        );
    }
    for i in 0..n {
        lines.push(
            json!({"kind": "fact", "customer": format!("kx_{}", i % 100),
                "text": format!("Fact {i}"), "sourceType": "CALL",
                "sourceId": format!("call_{}", i % (n / 2))})
            .to_string(),
        );
    }
    // A chunk that leans on nothing of the one before it.
    for i in 0..n {
        lines.push(
            json!({"kind": "user", "email": format!("late{i}@example.com"),
                "customer": format!("kx_{}", n - 1 - i)})
            .to_string(),
        );
    }
    lines
}

// The streaming import (on PostgreSQL several chunks at once, when their keys are apart) leaves
// exactly what importing the same lines one chunk after the other leaves.
db_test!(
    chunks_written_at_once_end_as_one_after_the_other,
    |app: TestApp| async move {
        let lines = book_leaning_on_earlier_chunks();
        assert!(lines.len() > 6 * CHUNK_LINES);
        // The chunk that leans on the one before only through the keys it changed begins where
        // the book says.
        assert!(lines[4 * CHUNK_LINES].contains(&format!("b{}@example.com", CHUNK_LINES)));
        let streamed = app.org("Streamed Co").await.organization_id;
        let report = import_lines(&app, &streamed, &lines).await;
        let one_by_one = app.org("One by one Co").await.organization_id;
        let expected = importer::import_text(&app.db, &one_by_one, &lines.join("\n"))
            .await
            .expect("import");
        assert_eq!(report.rejected, expected.rejected);
        assert!(report.rejected.len() <= 1, "{:?}", report.rejected);
        assert_eq!(report.imported, expected.imported);
        let (got, want) = (
            records_of(&app, &streamed).await,
            records_of(&app, &one_by_one).await,
        );
        let differ: Vec<_> = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a != b)
            .take(3)
            .collect();
        assert_eq!(got.len(), want.len(), "{differ:?}");
        assert!(differ.is_empty(), "{differ:?}");
        // The renamed users kept their records; their old emails went to new users.
        let n = CHUNK_LINES;
        let starts = |prefix: String| got.iter().any(|r| r.starts_with(&prefix));
        assert!(starts(format!("user ub_{n} renamed{n}@example.com ")));
        assert!(starts(format!("user - b{n}@example.com Newcomer ")));
        // Chunks written at once kept each customer's counts as users moved between them.
        assert_counts_per_customer(&app, &streamed).await;
    }
);

// Two imports of overlapping books into one organization at once: every record is created
// once (PostgreSQL: the second import waits for the first; SQLite: their chunks take turns).
db_test!(
    two_imports_into_one_organization_at_once,
    |app: TestApp| async move {
        let org = app.org("Twice Co").await.organization_id;
        let customers = CHUNK_LINES;
        let first = book(customers);
        let second: Vec<String> = book(customers)
            .into_iter()
            .map(|l| l.replace("\"Company ", "\"Company again "))
            .collect();
        let (a, b) = tokio::join!(
            import_lines(&app, &org, &first),
            import_lines(&app, &org, &second)
        );
        assert!(a.rejected.is_empty() && b.rejected.is_empty());
        for (table, key, expected) in [
            ("customers", "external_id", customers),
            ("users", "email", 2 * customers),
            ("sources", "source_id", customers),
        ] {
            let ids = ids_by(&app, table, key, &org).await;
            assert_eq!(ids.len(), expected, "{table} by {key}");
            let rows = scalar(
                &app,
                &format!("SELECT count(*) FROM {table} WHERE organization_id = ?"),
                &org,
            )
            .await;
            assert_eq!(rows, expected as i64, "{table}: one row per {key}");
        }
        assert_counts_per_customer(&app, &org).await;
    }
);
