//! The tool gateway over MCP at `/mcp`: initialize, tools/list, tools/call over streamable HTTP.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{db_test, helpers::TestApp, snap};

async fn rpc(
    app: &TestApp,
    key: Option<&str>,
    id: u64,
    method: &str,
    params: Value,
) -> (StatusCode, Value) {
    let mut req = app
        .client
        .post(format!("{}/mcp", app.base))
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.expect("mcp request");
    let status = resp.status();
    let text = resp.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

db_test!(mcp_tools, |app: TestApp| async move {
    let org = app.org("MCP Inc").await;
    crate::tools::seed(&app, &org.organization_id).await;
    let k = Some(org.api_key.as_str());

    let (status, body) = rpc(
        &app,
        k,
        1,
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "test", "version": "1.0"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["serverInfo"]["name"], "custintel");
    assert!(body["result"]["capabilities"]["tools"].is_object());

    let (status, body) = rpc(&app, k, 2, "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed = body["result"]["tools"].as_array().expect("tools").clone();
    // The same names, descriptions and schemas as GET /api/tools.
    let http = app.get("/api/tools", "/api/tools", &org.api_key).await;
    let http_tools = http.body["tools"].as_array().unwrap();
    assert_eq!(listed.len(), http_tools.len());
    for (m, h) in listed.iter().zip(http_tools) {
        assert_eq!(m["name"], h["name"]);
        assert_eq!(m["description"], h["description"]);
        assert_eq!(m["inputSchema"], h["inputSchema"]);
    }

    let (status, body) = rpc(
        &app,
        k,
        3,
        "tools/call",
        json!({"name": "svc_list_customers", "arguments": {"billingStatus": "PAYING"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let result = &body["result"];
    assert_eq!(result["isError"], false);
    let names: Vec<&str> = result["structuredContent"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Acme", "Umbrella Corp"]);
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);

    // Invalid input: an error result with the gateway's body.
    let (_, body) = rpc(
        &app,
        k,
        4,
        "tools/call",
        json!({"name": "svc_list_customers", "arguments": {"limit": 1001}}),
    )
    .await;
    assert_eq!(body["result"]["isError"], true);
    assert_eq!(
        body["result"]["structuredContent"]["details"][0]["path"],
        json!(["limit"])
    );
    snap!("mcp_invalid_input", body["result"]["structuredContent"]);

    // Another organization's key sees its own (empty) data.
    let other = app.org("Other").await;
    let (_, body) = rpc(
        &app,
        Some(&other.api_key),
        5,
        "tools/call",
        json!({"name": "svc_get_customer", "arguments": {"customer": "acme.com"}}),
    )
    .await;
    assert_eq!(body["result"]["isError"], true);
    assert_eq!(
        body["result"]["structuredContent"]["error"],
        "no customer with id, domain or externalId `acme.com`"
    );

    // No key, or a bad one: 401 before MCP.
    let (status, body) = rpc(&app, None, 6, "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body["error"].is_string());
    let (status, _) = rpc(&app, Some("ok_wrong"), 7, "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
});

db_test!(mcp_shares_the_allowance, |app: TestApp| async move {
    let org = custintel::ops::admin::create_org(
        &app.db,
        custintel::ops::admin::NewOrganization {
            name: "Tiny".into(),
            plan: custintel::ops::admin::Plan::Free,
            api_call_limit: Some(1),
            connection_limit: None,
            ingest_rate_limit: None,
            tracking_domains: vec![],
        },
    )
    .await
    .unwrap();
    let r = crate::tools::tool(&app, &org.api_key, "svc_list_customers", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    let (_, body) = rpc(
        &app,
        Some(&org.api_key),
        1,
        "tools/call",
        json!({"name": "svc_list_customers", "arguments": {}}),
    )
    .await;
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["code"],
        "api_limit_exceeded"
    );
});
