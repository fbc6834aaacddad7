//! Destinations: where automations and notifications deliver (signed webhooks, Slack channels).

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use chrono::{DateTime, Utc};
use rand::RngCore;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, Set,
};
use serde_json::{json, Value};

use crate::platform::{
    config_hash, free_key, uuid_id, ActionContext, Change, Patch, PlatformError, PlatformResult,
    ResourceRef,
};
use crate::{
    crypto::{mask, SecretBox},
    validation::Issues,
};
use entity::destination::{self, DestinationKind, DestinationSyncStatus};

/// Changes to a webhook destination; only sent fields change.
#[derive(Debug)]
pub struct DestinationChanges {
    pub name: Option<String>,
    /// `null` clears it.
    pub description: Patch<String>,
    pub enabled: Option<bool>,
    pub url: Option<String>,
}

/// A new destination: a signed webhook endpoint or a Slack channel (incoming webhook).
#[derive(Debug)]
pub struct NewDestination {
    /// A webhook endpoint needs `url`, a Slack channel `webhook_url`.
    pub kind: DestinationKind,
    pub name: String,
    pub description: Patch<String>,
    /// Defaults to true.
    pub enabled: Option<bool>,
    /// Makes this the organization's default destination.
    pub is_default: Option<bool>,
    pub url: Option<String>,
    pub webhook_url: Option<String>,
}

/// The spec's rule for webhook URLs: `https://`, or plain `http://` to a loopback host.
pub fn check_endpoint_url(url: &str) -> Result<(), String> {
    const RULE: &str = "must start with https://, or with http:// followed by localhost, \
                        127.0.0.1, [::1] or ::1 and then a port, a path or the end";
    if let Some(rest) = url.strip_prefix("https://") {
        return match url::Url::parse(url) {
            Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) && !rest.is_empty() => Ok(()),
            _ => Err("must be a valid URI".to_string()),
        };
    }
    if let Some(rest) = url.strip_prefix("http://") {
        for host in ["localhost", "127.0.0.1", "[::1]", "::1"] {
            if let Some(after) = rest.strip_prefix(host) {
                if after.is_empty() || after.starts_with(':') || after.starts_with('/') {
                    if after.chars().any(char::is_whitespace) {
                        return Err("must be a valid URI".to_string());
                    }
                    return Ok(());
                }
            }
        }
    }
    Err(RULE.to_string())
}

/// Slack incoming webhooks follow the endpoint rule too (loopback `http://` lets people test
/// against a local receiver).
pub fn check_slack_url(url: &str) -> Result<(), String> {
    check_endpoint_url(url)
        .map_err(|_| "must be an https:// Slack incoming-webhook URL".to_string())
}

pub async fn list(db: &DatabaseConnection, org: &str) -> PlatformResult<Vec<destination::Model>> {
    Ok(destination::Entity::find()
        .filter(destination::Column::OrganizationId.eq(org))
        .filter(destination::Column::ArchivedAt.is_null())
        .order_by_asc(destination::Column::CreatedAt)
        .order_by_asc(destination::Column::Key)
        .all(db)
        .await?)
}

pub async fn get<C: ConnectionTrait>(
    db: &C,
    org: &str,
    id: &str,
) -> PlatformResult<destination::Model> {
    let id = uuid_id(id, "destination")?;
    destination::Entity::find_by_id(id.clone())
        .filter(destination::Column::OrganizationId.eq(org))
        .one(db)
        .await?
        .ok_or_else(|| PlatformError::NotFound(format!("destination `{id}` not found")))
}

/// A new destination and, for a webhook, its signing secret (shown once).
#[derive(Debug)]
pub struct CreatedDestination {
    pub destination: destination::Model,
    pub signing_secret: Option<String>,
}

/// A Standard Webhooks signing secret: `whsec_` + base64 of 24 random bytes.
pub fn new_signing_secret() -> String {
    let mut bytes = [0u8; 24];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("whsec_{}", B64.encode(bytes))
}

pub fn hash_of(kind: &str, config: &Value) -> Option<String> {
    Some(config_hash(&json!({ "kind": kind, "config": config })))
}

/// Where a destination of `kind` sends, from the body's two URL fields: `url` for a webhook,
/// `webhookUrl` for Slack. Also the issues, by field: the kind's field missing or refused, or
/// the other kind's field given.
pub fn endpoint_of(
    kind: DestinationKind,
    url: Option<&str>,
    webhook_url: Option<&str>,
) -> (String, Vec<(&'static str, String)>) {
    let webhook = kind == DestinationKind::WebhookEndpoint;
    let (field, given, other_field, other_given, other_kind) = if webhook {
        ("url", url, "webhookUrl", webhook_url, "SLACK_CHANNEL")
    } else {
        ("webhookUrl", webhook_url, "url", url, "WEBHOOK_ENDPOINT")
    };
    let mut issues = Vec::new();
    if other_given.is_some() {
        issues.push((other_field, format!("only for {other_kind} destinations")));
    }
    let checked = given.map(|u| {
        if webhook {
            check_endpoint_url(u)
        } else {
            check_slack_url(u)
        }
    });
    match checked {
        None => issues.push((field, format!("`{field}` is required"))),
        Some(Err(m)) => issues.push((field, m)),
        Some(Ok(())) => {}
    }
    (given.unwrap_or_default().to_string(), issues)
}

/// What a destination is, as a create body or a configuration file declares it.
#[derive(Debug, Clone)]
pub struct DestinationContent {
    pub kind: DestinationKind,
    pub name: String,
    pub description: Option<String>,
    /// `None`: a new destination is enabled, a stored one keeps its state.
    pub enabled: Option<bool>,
    pub is_default: bool,
    /// Where it sends, checked by [`endpoint_of`]: a webhook's `url`, a Slack `webhookUrl`.
    pub endpoint: String,
}

/// What a destination's row holds for its endpoint: the provider, the config shown (secrets
/// masked) and the secret kept encrypted. A webhook keeps the signing secret of `keep`; one
/// without any gets a new one, returned in the clear to be shown once.
struct EndpointMaterial {
    provider: &'static str,
    config: Value,
    secret_ciphertext: String,
    new_signing_secret: Option<String>,
}

impl DestinationContent {
    fn material(&self, keep: Option<&destination::Model>, secrets: &SecretBox) -> EndpointMaterial {
        if self.kind == DestinationKind::SlackChannel {
            return EndpointMaterial {
                provider: "SLACK",
                config: json!({ "webhookUrl": mask(&self.endpoint, 24) }),
                secret_ciphertext: secrets.encrypt(&self.endpoint),
                new_signing_secret: None,
            };
        }
        let kept = keep
            .filter(|d| d.kind == DestinationKind::WebhookEndpoint)
            .and_then(|d| Some((d.secret_ciphertext.clone()?, d.config.get("signingSecret")?)));
        let (secret_ciphertext, masked, new_signing_secret) = match kept {
            Some((cipher, masked)) => (cipher, masked.clone(), None),
            None => {
                let secret = new_signing_secret();
                (
                    secrets.encrypt(&secret),
                    json!(mask(&secret, 6)),
                    Some(secret),
                )
            }
        };
        EndpointMaterial {
            provider: "WEBHOOK",
            config: json!({ "url": self.endpoint, "signingSecret": masked }),
            secret_ciphertext,
            new_signing_secret,
        }
    }

    /// A new destination's row under `key`, made `now`, and a webhook's new signing secret.
    pub fn new_row(
        self,
        secrets: &SecretBox,
        org: &str,
        key: &str,
        managed_by: &'static str,
        now: DateTime<Utc>,
    ) -> (destination::ActiveModel, Option<String>) {
        let material = self.material(None, secrets);
        let row = destination::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            key: Set(key.to_string()),
            managed_by: Set(managed_by.into()),
            name: Set(self.name),
            description: Set(self.description),
            provider: Set(material.provider.to_string()),
            kind: Set(self.kind),
            enabled: Set(self.enabled.unwrap_or(true)),
            config_hash: Set(hash_of(self.kind.as_str(), &material.config)),
            config: Set(material.config),
            secret_ciphertext: Set(Some(material.secret_ciphertext)),
            // Webhooks and Slack incoming webhooks have no provider-side object to sync.
            sync_status: Set(DestinationSyncStatus::Synced),
            last_synced_at: Set(Some(now)),
            provider_error_code: Set(None),
            provider_error_message: Set(None),
            is_default: Set(self.is_default),
            schema_version: Set(crate::platform::SCHEMA_VERSION.to_string()),
            archived_at: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        };
        (row, material.new_signing_secret)
    }

    /// Whether `stored` holds this content already, managed by `managed_by` and not archived.
    /// A Slack channel's hook is compared with the one stored encrypted.
    pub fn is_stored_in(
        &self,
        stored: &destination::Model,
        managed_by: &str,
        secrets: &SecretBox,
    ) -> bool {
        let endpoint_same = match self.kind {
            DestinationKind::WebhookEndpoint => {
                stored.config.get("url").and_then(Value::as_str) == Some(self.endpoint.as_str())
            }
            DestinationKind::SlackChannel => stored
                .secret_ciphertext
                .as_deref()
                .and_then(|c| secrets.decrypt(c).ok())
                .is_some_and(|hook| hook == self.endpoint),
        };
        stored.managed_by == managed_by
            && stored.archived_at.is_none()
            && stored.kind == self.kind
            && stored.name == self.name
            && stored.description == self.description
            && stored.is_default == self.is_default
            && self.enabled.is_none_or(|e| e == stored.enabled)
            && endpoint_same
    }
}

/// The one write of a destination's row, for the API's create and `custintel apply`: a new
/// destination under `key`, or `current` given this content in place (restored if archived,
/// managed by `managed_by` from now on). A default destination takes the place of the
/// organization's other default.
#[allow(clippy::too_many_arguments)]
pub async fn store<C: ConnectionTrait>(
    conn: &C,
    secrets: &SecretBox,
    org: &str,
    key: &str,
    content: DestinationContent,
    managed_by: &'static str,
    current: Option<destination::Model>,
    now: DateTime<Utc>,
) -> PlatformResult<CreatedDestination> {
    if content.is_default {
        clear_default(conn, org).await?;
    }
    let Some(current) = current else {
        let (row, signing_secret) = content.new_row(secrets, org, key, managed_by, now);
        return Ok(CreatedDestination {
            destination: row.insert(conn).await?,
            signing_secret,
        });
    };
    let material = content.material(Some(&current), secrets);
    let mut model = current.into_active_model();
    model.managed_by = Set(managed_by.into());
    model.kind = Set(content.kind);
    model.provider = Set(material.provider.to_string());
    model.name = Set(content.name);
    model.description = Set(content.description);
    if let Some(enabled) = content.enabled {
        model.enabled = Set(enabled);
    }
    model.is_default = Set(content.is_default);
    model.config_hash = Set(hash_of(content.kind.as_str(), &material.config));
    model.config = Set(material.config);
    model.secret_ciphertext = Set(Some(material.secret_ciphertext));
    model.archived_at = Set(None);
    model.updated_at = Set(now);
    Ok(CreatedDestination {
        destination: model.update(conn).await?,
        signing_secret: material.new_signing_secret,
    })
}

pub async fn create(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    ctx: &ActionContext<'_>,
    body: NewDestination,
) -> PlatformResult<Change<CreatedDestination>> {
    ctx.auth.require_write()?;
    let mut issues = Issues::default();
    issues.length(&["name"], &body.name, 1, 120);
    if let Some(d) = body.description.as_value() {
        issues.length(&["description"], d, 0, 1000);
    }
    let (endpoint, problems) =
        endpoint_of(body.kind, body.url.as_deref(), body.webhook_url.as_deref());
    for (field, message) in problems {
        issues.push(vec![field.into()], message);
    }
    issues.into_result()?;

    let org = ctx.org().to_string();
    let txn = crate::db::begin_write(db).await?;
    let key = free_key::<destination::Entity>(
        &txn,
        &org,
        &body.name,
        destination::Column::OrganizationId,
        destination::Column::Key,
    )
    .await?;
    let content = DestinationContent {
        kind: body.kind,
        name: body.name,
        description: body.description.value(),
        enabled: body.enabled,
        is_default: body.is_default.unwrap_or(false),
        endpoint,
    };
    let created = store(&txn, secrets, &org, &key, content, "UI", None, Utc::now()).await?;
    let destination = &created.destination;
    let resources = vec![ResourceRef::new("destination", destination.id.clone())];
    let details = json!({ "key": destination.key });
    Change::commit(txn, ctx, created, resources, details).await
}

pub async fn clear_default<C: ConnectionTrait>(conn: &C, org: &str) -> PlatformResult<()> {
    destination::Entity::update_many()
        .col_expr(
            destination::Column::IsDefault,
            sea_orm::sea_query::Expr::value(false),
        )
        .filter(destination::Column::OrganizationId.eq(org))
        .filter(destination::Column::IsDefault.eq(true))
        .exec(conn)
        .await?;
    Ok(())
}

pub async fn update(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
    body: DestinationChanges,
) -> PlatformResult<Change<destination::Model>> {
    ctx.auth.require_write()?;
    let mut issues = Issues::default();
    if let Some(name) = &body.name {
        issues.length(&["name"], name, 1, 120);
    }
    if let Some(d) = body.description.as_value() {
        issues.length(&["description"], d, 0, 1000);
    }
    if let Some(url) = &body.url {
        if let Err(m) = check_endpoint_url(url) {
            issues.push(vec!["url".into()], m);
        }
    }
    issues.into_result()?;

    let txn = crate::db::begin_write(db).await?;
    let current = get(&txn, ctx.org(), id).await?;
    // A valid body for a destination of another type: the resource's state, not the body, is
    // what does not fit.
    if current.kind != DestinationKind::WebhookEndpoint {
        return Err(PlatformError::Conflict {
            message: format!(
                "this destination is a {}, not a WEBHOOK_ENDPOINT: only webhook endpoints are \
                 changed through this route",
                current.kind.as_str()
            ),
            unmet: vec![],
        });
    }
    // Enabling and disabling stay platform actions; anything else belongs to the file.
    let changes_content =
        body.name.is_some() || body.description != Patch::Absent || body.url.is_some();
    if changes_content {
        refuse_code_managed(&current)?;
    }
    let mut changed = Vec::new();
    let mut config = current.config.clone();
    let mut model = current.into_active_model();
    if let Some(name) = body.name {
        model.name = Set(name);
        changed.push("name");
    }
    match body.description {
        Patch::Value(d) => {
            model.description = Set(Some(d));
            changed.push("description");
        }
        Patch::Null => {
            model.description = Set(None);
            changed.push("description");
        }
        Patch::Absent => {}
    }
    if let Some(enabled) = body.enabled {
        model.enabled = Set(enabled);
        changed.push("enabled");
    }
    if let Some(url) = body.url {
        config["url"] = json!(url);
        model.config_hash = Set(hash_of(DestinationKind::WebhookEndpoint.as_str(), &config));
        model.config = Set(config);
        changed.push("url");
    }
    model.updated_at = Set(Utc::now());
    let destination = model.update(&txn).await?;
    let resources = vec![ResourceRef::new("destination", destination.id.clone())];
    Change::commit(
        txn,
        ctx,
        destination,
        resources,
        json!({ "changed": changed }),
    )
    .await
}

/// 409 for a destination that `custintel apply` manages: its file owns its content.
pub fn refuse_code_managed(current: &destination::Model) -> PlatformResult<()> {
    if current.managed_by != "CODE" {
        return Ok(());
    }
    let message = format!(
        "destination `{}` is managed by code (custintel apply); change its file instead",
        current.key
    );
    Err(PlatformError::Conflict {
        unmet: vec![message.clone()],
        message,
    })
}

pub async fn disable(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
) -> PlatformResult<Change<destination::Model>> {
    ctx.auth.require_write()?;
    let txn = crate::db::begin_write(db).await?;
    let current = get(&txn, ctx.org(), id).await?;
    let destination = if current.enabled {
        let mut model = current.into_active_model();
        model.enabled = Set(false);
        model.updated_at = Set(Utc::now());
        model.update(&txn).await?
    } else {
        current
    };
    let resources = vec![ResourceRef::new("destination", destination.id.clone())];
    Change::commit(txn, ctx, destination, resources, json!({})).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::patterns::ENDPOINT_URL_PATTERN;

    /// Every URL the description's pattern admits passes the server's check.
    #[test]
    fn the_pattern_admits_only_urls_the_check_takes() {
        let pattern = jsonschema::validator_for(
            &serde_json::json!({"type": "string", "pattern": ENDPOINT_URL_PATTERN}),
        )
        .expect("pattern compiles");
        let samples = [
            "https://crm.example.com/hooks/x?a=1",
            "https://a-b.io:8443",
            "https://localhost",
            "https://999.1.1.1",
            "https://x:99999",
            "https://",
            "http://localhost:8080/hook",
            "http://127.0.0.1",
            "http://[::1]:9/x",
            "http://localhost.evil.com",
            "http://example.com",
            "00",
            "https://ex ample.com",
            "http://[::1]:\u{85}x",
        ];
        for url in samples {
            let admitted = pattern.is_valid(&serde_json::json!(url));
            if admitted {
                assert!(
                    check_endpoint_url(url).is_ok(),
                    "{url} admitted but refused"
                );
            }
        }
        assert!(pattern.is_valid(&serde_json::json!("https://crm.example.com/hooks/x")));
        assert!(pattern.is_valid(&serde_json::json!("http://127.0.0.1:9000/hook")));
        assert!(!pattern.is_valid(&serde_json::json!("http://example.com")));
    }
}
