//! The HTTP side: routes, request parsing, the command and error envelopes, MCP and
//! `/metrics`. It turns requests into the domain's plain inputs and the domain's results and
//! errors into response bodies; the domain never imports it.

pub mod allow;
pub mod api;
pub mod body_contract;
pub mod correlation;
pub mod described_rules;
pub mod envelope;
pub mod examples;
pub mod json_answer;
pub mod links;
pub mod mcp;
pub mod metrics;
pub mod request;
pub mod server;
pub mod tracker_script;
pub mod typed_json;
pub mod types;
