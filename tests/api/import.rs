//! `custintel import`: JSON Lines in, good lines kept, bad lines reported by number.

use std::{io::Write, process::Stdio};

use serde_json::{json, Value};

fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_custintel"))
}

/// Runs `custintel import`, feeding `stdin` when given; (exit code, stdout JSON).
fn import(db_url: &str, org: &str, file: &str, stdin: Option<&str>) -> (i32, Value) {
    let mut child = bin()
        .args(["import", "--org", org, file])
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run custintel import");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("write stdin");
        }
    }
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "one line of JSON: {stdout} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(lines[0]).expect("JSON"),
    )
}

fn create_org(db_url: &str) -> String {
    let out = bin()
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
    let out = bin()
        .args(["import", "--org", "org_missing", path.to_str().unwrap()])
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no organization"));
}
