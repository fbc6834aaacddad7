//! A schedule run's digest: the subjects of the audience whose linked signals (combined by the
//! match mode) occurred since the previous run, or the whole audience when no signal is linked;
//! at most [`MAX_SUBJECTS`].

use std::collections::{HashMap, HashSet};

use chrono::Utc;
use entity::{automation_run, customer, signal_hit, user};
use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::{json, Value};

use super::automations::AutomationView;
use super::config::{self, Audience, Grain, Resolver};

/// Most subjects one digest lists.
pub const MAX_SUBJECTS: usize = 1_000;
/// Most rows a whole-audience digest looks at.
const SCAN_LIMIT: u64 = 50_000;

fn customer_subject(c: &customer::Model) -> Value {
    let key = c
        .external_id
        .clone()
        .or_else(|| c.domain.clone())
        .unwrap_or_else(|| c.id.clone());
    json!({ "grain": "customer", "id": c.id, "key": key, "name": c.name, "customerId": c.id })
}

fn user_subject(u: &user::Model, resolver: Option<Resolver>) -> Value {
    let key = match resolver {
        Some(Resolver::UserId) => u.external_id.clone(),
        _ => None,
    }
    .or_else(|| u.email.clone())
    .or_else(|| u.external_id.clone())
    .unwrap_or_else(|| u.id.clone());
    json!({
        "grain": "user", "id": u.id, "key": key,
        "name": u.name.clone().or_else(|| u.email.clone()), "customerId": u.customer_id,
    })
}

pub async fn subjects(
    db: &DatabaseConnection,
    view: &AutomationView,
    run: &automation_run::Model,
) -> Result<Vec<Value>, DbErr> {
    let automation = &view.automation;
    let org = automation.organization_id.as_str();
    let audience = config::parse_audience(&automation.audience_filter_json)
        .map_err(|_| DbErr::Custom("the automation's audienceFilterJson does not fit".into()))?;
    let active: Vec<_> = view
        .signals
        .iter()
        .filter(|s| s.archived_at.is_none())
        .collect();
    if active.is_empty() {
        return whole_audience(db, org, &audience).await;
    }
    let since = run
        .digest_since
        .unwrap_or(run.triggered_at - chrono::Duration::days(7));
    let hits: Vec<(String, String)> = signal_hit::Entity::find()
        .select_only()
        .column(signal_hit::Column::SignalId)
        .column(signal_hit::Column::SubjectId)
        .distinct()
        .filter(signal_hit::Column::OrganizationId.eq(org))
        .filter(signal_hit::Column::SignalId.is_in(active.iter().map(|s| s.id.clone())))
        .filter(signal_hit::Column::Step.eq(signal_hit::OCCURRENCE))
        .filter(signal_hit::Column::At.gte(since))
        .filter(signal_hit::Column::At.lte(run.triggered_at))
        .into_tuple()
        .all(db)
        .await?;
    let needed = match automation.match_mode.as_str() {
        "ALL" => active.len(),
        _ => 1,
    };
    let mut per_subject: HashMap<String, HashSet<String>> = HashMap::new();
    for (signal_id, subject_id) in hits {
        per_subject.entry(subject_id).or_default().insert(signal_id);
    }
    // The grain and resolver of a subject's signals tell how to load and name it.
    let rules: HashMap<String, (Grain, Resolver)> = active
        .iter()
        .filter_map(|s| {
            let rule = config::compile_signal(s.kind, &s.definition).ok()?;
            Some((s.id.clone(), (rule.grain, rule.resolver)))
        })
        .collect();
    let mut qualified: Vec<(String, Grain, Resolver)> = per_subject
        .into_iter()
        .filter(|(_, sigs)| sigs.len() >= needed)
        .filter_map(|(subject, sigs)| {
            let (grain, resolver) = sigs.iter().find_map(|s| rules.get(s))?;
            Some((subject, *grain, *resolver))
        })
        .collect();
    qualified.sort();
    let now = Utc::now();
    let mut out = Vec::new();
    for chunk in qualified.chunks(500) {
        let user_ids: Vec<&str> = chunk
            .iter()
            .filter(|(_, g, _)| *g == Grain::User)
            .map(|(id, _, _)| id.as_str())
            .collect();
        let users: HashMap<String, user::Model> =
            crate::db::find_by_ids_in_organization::<user::Entity, _, _>(
                db,
                user::Column::Id,
                user_ids,
                org,
                |u| &u.organization_id,
            )
            .await?
            .into_iter()
            .map(|u| (u.id.clone(), u))
            .collect();
        let customer_ids: HashSet<String> = chunk
            .iter()
            .filter(|(_, g, _)| *g == Grain::Customer)
            .map(|(id, _, _)| id.clone())
            .chain(users.values().filter_map(|u| u.customer_id.clone()))
            .collect();
        let customers: HashMap<String, customer::Model> =
            crate::db::find_by_ids_in_organization::<customer::Entity, _, _>(
                db,
                customer::Column::Id,
                customer_ids,
                org,
                |c| &c.organization_id,
            )
            .await?
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
        for (id, grain, resolver) in chunk {
            let (subject, user, customer) = match grain {
                Grain::Customer => match customers.get(id) {
                    Some(c) => (customer_subject(c), None, Some(c)),
                    None => continue,
                },
                Grain::User => match users.get(id) {
                    Some(u) => {
                        let c = u.customer_id.as_ref().and_then(|cid| customers.get(cid));
                        (user_subject(u, Some(*resolver)), Some(u), c)
                    }
                    // Anonymous visitors have no record to check an audience against.
                    None if audience.is_everyone() => (
                        json!({ "grain": "user", "id": id,
                                "key": id.trim_start_matches("visitor:"),
                                "name": null, "customerId": null }),
                        None,
                        None,
                    ),
                    None => continue,
                },
            };
            if audience.admits(customer, user, now).is_ok() {
                out.push(subject);
                if out.len() >= MAX_SUBJECTS {
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

/// Every subject of the audience: users when it filters by stage, else customers.
async fn whole_audience(
    db: &DatabaseConnection,
    org: &str,
    audience: &Audience,
) -> Result<Vec<Value>, DbErr> {
    let now = Utc::now();
    let mut out = Vec::new();
    let mut customers = customer::Entity::find().filter(customer::Column::OrganizationId.eq(org));
    if let Some(statuses) = &audience.billing_status {
        customers =
            customers.filter(customer::Column::BillingStatus.is_in(statuses.iter().copied()));
    }
    if let Some(min) = audience.min_mrr_cents {
        customers = customers.filter(customer::Column::MrrCents.gte(min));
    }
    if let Some(max) = audience.max_mrr_cents {
        customers = customers.filter(customer::Column::MrrCents.lte(max));
    }
    let customers = customers
        .order_by_asc(customer::Column::Name)
        .limit(SCAN_LIMIT)
        .all(db)
        .await?;
    if audience.stage.is_none() {
        for c in &customers {
            if audience.admits(Some(c), None, now).is_ok() {
                out.push(customer_subject(c));
                if out.len() >= MAX_SUBJECTS {
                    break;
                }
            }
        }
        return Ok(out);
    }
    let by_id: HashMap<&str, &customer::Model> =
        customers.iter().map(|c| (c.id.as_str(), c)).collect();
    let users = user::Entity::find()
        .filter(user::Column::OrganizationId.eq(org))
        .filter(user::Column::Stage.is_in(audience.stage.clone().unwrap_or_default()))
        .order_by_asc(user::Column::Email)
        .limit(SCAN_LIMIT)
        .all(db)
        .await?;
    for u in &users {
        let c = u
            .customer_id
            .as_deref()
            .and_then(|id| by_id.get(id).copied());
        if audience.admits(c, Some(u), now).is_ok() {
            out.push(user_subject(u, None));
            if out.len() >= MAX_SUBJECTS {
                break;
            }
        }
    }
    Ok(out)
}
