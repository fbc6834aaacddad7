//! Demo data: fills one organization with a small, realistic B2B SaaS book of business
//! (customers with billing history, their users, conversations with provenance-backed facts,
//! tracked events) and the platform configuration around it (agents, signals, destinations,
//! automations).
//!
//! Everything is derived from the hand-written tables below, varied by index, so every run has
//! the same shape; only ids (random UUIDs), secrets and timestamps (relative to now) differ.
//! Keys are unique per organization only, so several organizations can be seeded in one
//! database.

mod conversations;
mod platform;

use std::collections::HashMap;

use anyhow::{anyhow, ensure, Result};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{ActiveModelTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, Set};
use serde_json::{json, Value};

use conversations::*;
use platform::*;

use crate::crypto::SecretBox;
use crate::import::{
    self, CustomerRecord, FactRecord, ImportRecord, SourceRecord, UserRecord, WorkspaceUserRecord,
};
use entity::{
    agent, automation_run::AutomationRunStatus, billing_change, customer::BillingStatus, event,
    fact::FactStatus, visitor,
};

// Short names for the dense tables below (`BillingStatus::None` cannot be imported as `None`).
const PAYING: BillingStatus = BillingStatus::Paying;
const TRIALING: BillingStatus = BillingStatus::Trialing;
const CHURNED: BillingStatus = BillingStatus::Churned;
const NONE: BillingStatus = BillingStatus::None;

/// Rows per multi-row INSERT, well below SQLite's and Postgres' bound-parameter limits.
const INSERT_CHUNK: usize = 40;

/// Customer companies: (name, domain, industry, region).
#[rustfmt::skip]
const COMPANIES: &[(&str, &str, &str, &str)] = &[
    ("Northwind Analytics",     "northwind-analytics.com",   "analytics",         "EU"),
    ("Acme Logistics",          "acme-logistics.com",        "logistics",         "NA"),
    ("Bluepeak Health",         "bluepeak-health.com",       "healthcare",        "NA"),
    ("Copperleaf Finance",      "copperleaf-finance.com",    "fintech",           "EU"),
    ("Driftwood Media",         "driftwood-media.com",       "media",             "NA"),
    ("Evergreen Robotics",      "evergreen-robotics.com",    "manufacturing",     "APAC"),
    ("Foxglove Software",       "foxglove.io",               "software",          "EU"),
    ("Granite Insurance Group", "granite-insurance.com",     "insurance",         "NA"),
    ("Harborview Hotels",       "harborview-hotels.com",     "hospitality",       "EU"),
    ("Ironclad Security",       "ironclad-sec.com",          "cybersecurity",     "NA"),
    ("Juniper Learning",        "juniperlearning.com",       "edtech",            "NA"),
    ("Kestrel Aerospace",       "kestrel-aero.com",          "aerospace",         "EU"),
    ("Lumen Retail",            "lumenretail.com",           "retail",            "LATAM"),
    ("Meridian Payments",       "meridianpay.com",           "fintech",           "EU"),
    ("Nimbus Cloudworks",       "nimbus-cloudworks.com",     "software",          "NA"),
    ("Orchard Foods",           "orchardfoods.com",          "food and beverage", "NA"),
    ("Pinecrest Legal",         "pinecrest-legal.com",       "legal",             "EU"),
    ("Quartz Energy",           "quartz-energy.com",         "energy",            "APAC"),
    ("Riverstone Properties",   "riverstone-properties.com", "real estate",       "NA"),
    ("Saltmarsh Biotech",       "saltmarsh-bio.com",         "biotech",           "EU"),
    ("Tidewater Shipping",      "tidewater-shipping.com",    "logistics",         "APAC"),
    ("Umbra Games",             "umbragames.com",            "gaming",            "NA"),
    ("Vantage HR",              "vantagehr.com",             "hr tech",           "EU"),
    ("Willow Telecom",          "willowtelecom.com",         "telecom",           "LATAM"),
    ("Xenon Labs",              "xenonlabs.io",              "software",          "NA"),
    ("Yellowtail Travel",       "yellowtail-travel.com",     "travel",            "APAC"),
    ("Zephyr Mobility",         "zephyr-mobility.com",       "mobility",          "EU"),
    ("Atlas Construction",      "atlas-construction.com",    "construction",      "NA"),
];

/// Billing status by company index, cycled: a book that is mostly paying, with some trials,
/// some churn and some free sign-ups.
const STATUS_CYCLE: [BillingStatus; 7] = [PAYING, PAYING, TRIALING, PAYING, CHURNED, PAYING, NONE];

/// Paid plans: (plan, base MRR in cents, MRR step per variant, base seats). Three variants per
/// plan (index % 3) keep MRR within 9_900..=499_900.
const PLANS: [(&str, i64, i64, i64); 4] = [
    ("starter", 9_900, 2_000, 5),
    ("growth", 49_900, 10_000, 20),
    ("pro", 149_900, 30_000, 60),
    ("enterprise", 499_900, -100_000, 200),
];

#[rustfmt::skip]
const FIRST_NAMES: &[&str] = &[
    "Olivia", "Liam", "Amara", "Noah", "Sofia", "Mateo", "Hana", "Ethan", "Chloe", "Lucas",
    "Ines", "Arjun", "Grace", "Felix", "Yuki", "Omar", "Lena", "Marcus", "Priscila", "Jonas",
    "Aisha", "Diego", "Freya", "Kwame", "Nora", "Rafael", "Mei", "Samuel", "Elif", "Tobias",
];

#[rustfmt::skip]
const LAST_NAMES: &[&str] = &[
    "Andersen", "Baptiste", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Hoffman",
    "Ibrahim", "Jensen", "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okonkwo", "Patel",
    "Quinn", "Rossi", "Schmidt", "Tanaka", "Usman", "Varga", "Walsh", "Xu", "Yilmaz", "Zimmer",
    "Brennan", "Costa", "Haddad", "Novak",
];

const JOB_TITLES: &[&str] = &[
    "VP Customer Success",
    "Support Lead",
    "CS Operations Manager",
    "Account Manager",
    "Data Analyst",
    "Head of Support",
    "Customer Success Manager",
    "Support Engineer",
];

/// Product role of a customer's user by position: the first user is the account admin.
const USER_ROLES: [&str; 5] = ["admin", "manager", "member", "viewer", "member"];

/// User stage by position within a customer, per billing status.
const PAYING_STAGES: [&str; 5] = ["engaged", "activated", "engaged", "inactive", "activated"];
#[rustfmt::skip]
const TRIAL_STAGES: [&str; 5] = ["activated", "signed_up", "signed_up", "discovered", "signed_up"];

/// Our own team: (name, email, role). CSMs own customers alternately; the account owner owns
/// opportunities.
const WORKSPACE_USERS: [(&str, &str, &str); 5] = [
    ("Maya Chen", "maya.chen@ourco.com", "CSM"),
    ("Daniel Okafor", "daniel.okafor@ourco.com", "CSM"),
    ("Priya Raman", "priya.raman@ourco.com", "MANAGER"),
    ("Tom Becker", "tom.becker@ourco.com", "ACCOUNT_OWNER"),
    ("Sofia Alvarez", "sofia.alvarez@ourco.com", "ADMIN"),
];
const ACCOUNT_OWNER: usize = 3;
const SUPPORT_DESK: (&str, &str) = ("OurCo Support", "support@ourco.com");

/// Pages of the tracked app: (path, title).
const PAGES: &[(&str, &str)] = &[
    ("/dashboard", "Dashboard"),
    ("/reports", "Reports"),
    ("/accounts", "Accounts"),
    ("/integrations", "Integrations"),
    ("/settings/billing", "Billing"),
];

/// Custom events, named like the signals below match on: (name, path).
const CUSTOM_EVENTS: &[(&str, &str)] = &[
    ("seat_limit_reached", "/settings/users"),
    ("export_failed", "/reports/export"),
    ("pricing_viewed", "/settings/billing"),
    ("report_created", "/reports"),
    ("integration_connected", "/integrations"),
];

const EVENT_COUNT: usize = 40;
const APP_ORIGIN: &str = "https://app.example.com";

/// A customer with everything derived from its table row, built before anything is written
/// so that rows referring to each other agree (activity times, billing history, contacts).
struct DemoCustomer {
    id: String,
    index: usize,
    name: &'static str,
    domain: &'static str,
    industry: &'static str,
    region: &'static str,
    status: BillingStatus,
    plan: &'static str,
    seats: i64,
    mrr_cents: i64,
    created_at: DateTime<Utc>,
    /// When the customer stopped paying; conversations with it happen before this.
    churned_at: Option<DateTime<Utc>>,
    last_activity_at: Option<DateTime<Utc>>,
    /// (at, billing status, MRR in cents), oldest first; the last entry is the current state.
    history: Vec<(DateTime<Utc>, BillingStatus, i64)>,
    users: Vec<DemoUser>,
}

struct DemoUser {
    id: String,
    number: usize,
    first: &'static str,
    name: String,
    email: String,
    role: &'static str,
    title: &'static str,
    stage: &'static str,
    created_at: DateTime<Utc>,
    last_activity_at: Option<DateTime<Utc>>,
}

/// Seeds the demo data set into an existing organization, in one transaction. Customers,
/// users, workspace users, sources and facts go through the import path
/// ([`crate::import::import_records`]), like a `custintel import` file would.
pub async fn seed(db: &DatabaseConnection, secrets: &SecretBox, org_id: &str) -> Result<()> {
    let now = Utc::now();
    let mut customers = plan_customers(now);
    let records = import_records_of(&customers, now)?;
    let txn = crate::db::begin_write(db).await?;
    let report = import::import_records(
        &txn,
        org_id,
        records.into_iter().enumerate().map(|(i, r)| (i + 1, Ok(r))),
    )
    .await?;
    ensure!(
        report.rejected.is_empty(),
        "demo records were rejected: {:?}",
        report.rejected
    );
    adopt_ids(&txn, org_id, &mut customers).await?;
    seed_billing_history(&txn, org_id, &customers).await?;
    seed_events(&txn, org_id, &customers).await?;
    let agents = seed_agents(&txn, org_id, now).await?;
    let signals = seed_signals(&txn, org_id, now).await?;
    let destinations = seed_destinations(&txn, secrets, org_id, now).await?;
    seed_automations(&txn, org_id, &agents, &signals, &destinations, now).await?;
    txn.commit().await?;
    Ok(())
}

/// The demo's customers, users, workspace users, sources and facts as import records, in an
/// order where every reference points back (sources oldest first, each followed by its facts).
fn import_records_of(customers: &[DemoCustomer], now: DateTime<Utc>) -> Result<Vec<ImportRecord>> {
    let mut records: Vec<ImportRecord> = customers.iter().map(customer_record).collect();
    records.extend(
        customers
            .iter()
            .flat_map(|c| c.users.iter().map(move |u| user_record(c, u))),
    );
    records.extend(workspace_user_records(now));
    let mut planned = Vec::new();
    for (k, kind) in SOURCE_KINDS.iter().enumerate() {
        for s in 0..kind.count {
            planned.push(plan_source(customers, kind, k, s, now)?);
        }
    }
    planned.sort_by_key(|p| p.source.occurred_at);
    for p in planned {
        records.push(ImportRecord::Source(p.source));
        records.extend(p.facts.into_iter().map(ImportRecord::Fact));
    }
    Ok(records)
}

/// Points the planned customers and users at the ids the import gave them.
async fn adopt_ids(
    txn: &DatabaseTransaction,
    org_id: &str,
    customers: &mut [DemoCustomer],
) -> Result<()> {
    let customer_ids = import::customer_ids_by_external_id(txn, org_id).await?;
    let user_ids = import::user_ids_by_external_id(txn, org_id).await?;
    for c in customers.iter_mut() {
        c.id = customer_ids
            .get(&customer_external_id(c))
            .cloned()
            .ok_or_else(|| anyhow!("demo customer {} was not imported", c.name))?;
        for u in c.users.iter_mut() {
            u.id = user_ids
                .get(&user_external_id(u))
                .cloned()
                .ok_or_else(|| anyhow!("demo user {} was not imported", u.name))?;
        }
    }
    Ok(())
}

fn customer_external_id(c: &DemoCustomer) -> String {
    format!("cus_{:04}", c.index + 1)
}

fn user_external_id(u: &DemoUser) -> String {
    format!("u_{:04}", u.number)
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn days(n: i64) -> Duration {
    Duration::days(n)
}

fn hours(n: i64) -> Duration {
    Duration::hours(n)
}

/// Writes rows in multi-row INSERTs of at most `INSERT_CHUNK` rows.
async fn insert_rows<A>(txn: &DatabaseTransaction, rows: Vec<A>) -> Result<()>
where
    A: ActiveModelTrait + Send,
{
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<A> = rows.by_ref().take(INSERT_CHUNK).collect();
        A::Entity::insert_many(chunk)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

fn plan_customers(now: DateTime<Utc>) -> Vec<DemoCustomer> {
    let mut next_user = 0;
    COMPANIES
        .iter()
        .enumerate()
        .map(|(i, &(name, domain, industry, region))| {
            let k = i as i64;
            let status = STATUS_CYCLE[i % STATUS_CYCLE.len()];
            let (paid_plan, base_mrr, mrr_step, base_seats) = PLANS[i % PLANS.len()];
            let paid_mrr = base_mrr + mrr_step * (k % 3);
            let (plan, seats, mrr_cents) = match status {
                PAYING => (paid_plan, base_seats + (k % 3) * 5, paid_mrr),
                TRIALING => ("pro", 10 + (k % 3) * 5, 0),
                CHURNED => (paid_plan, base_seats, 0),
                _ => ("free", 3, 0),
            };
            // Paying accounts are the oldest; trials are recent sign-ups.
            let created_days = match status {
                PAYING => 75 + (k * 7) % 45,
                TRIALING => 15 + (k * 5) % 30,
                CHURNED => 105 + (k * 3) % 15,
                _ => 30 + (k * 11) % 70,
            };
            let created_at = now - days(created_days) - hours(k % 9);
            let churned_at = (status == CHURNED).then(|| now - days(61 + (k * 5) % 20));
            let history = billing_timeline(status, created_at, churned_at, paid_mrr, k, now);
            // One paying account in five has gone quiet: the at-risk accounts of the demo.
            let stale = status == PAYING && i % 5 == 3;
            let base_activity = match status {
                PAYING if stale => Some(now - days((61 + k % 20).min(created_days - 1))),
                PAYING => Some(now - days(k % 10) - hours(1 + k % 7)),
                TRIALING => Some(now - days(k % 4) - hours(2 + k % 5)),
                CHURNED => churned_at.map(|t| t - days(2)),
                _ if i % 2 == 1 => Some(created_at + days(1)),
                _ => None,
            };
            let user_count = 2 + i % 4;
            let users: Vec<DemoUser> = (0..user_count)
                .map(|j| {
                    next_user += 1;
                    plan_user(
                        next_user,
                        j,
                        domain,
                        status,
                        stale,
                        created_at,
                        base_activity,
                    )
                })
                .collect();
            // The account was last active when its most recent user was.
            let last_activity_at = users
                .iter()
                .filter_map(|u| u.last_activity_at)
                .chain(base_activity)
                .max();
            DemoCustomer {
                id: new_id(),
                index: i,
                name,
                domain,
                industry,
                region,
                status,
                plan,
                seats,
                mrr_cents,
                created_at,
                churned_at,
                last_activity_at,
                history,
                users,
            }
        })
        .collect()
}

/// The billing status changes that lead to a customer's current status.
fn billing_timeline(
    status: BillingStatus,
    created_at: DateTime<Utc>,
    churned_at: Option<DateTime<Utc>>,
    paid_mrr: i64,
    k: i64,
    now: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, BillingStatus, i64)> {
    let converted_at = created_at + days(14);
    match status {
        // Every third paying account landed smaller and expanded a month later.
        PAYING if k % 3 == 0 => vec![
            (created_at, TRIALING, 0),
            (converted_at, PAYING, paid_mrr * 6 / 1000 * 100),
            (converted_at + days(30), PAYING, paid_mrr),
        ],
        PAYING => vec![(created_at, TRIALING, 0), (converted_at, PAYING, paid_mrr)],
        TRIALING => vec![(created_at, NONE, 0), (now - days(3 + k % 10), TRIALING, 0)],
        CHURNED => {
            let mut steps = vec![(created_at, TRIALING, 0), (converted_at, PAYING, paid_mrr)];
            if let Some(at) = churned_at {
                steps.push((at, CHURNED, 0));
            }
            steps
        }
        _ => vec![(created_at, NONE, 0)],
    }
}

/// User `number` (1-based across the organization), the `j`th of its customer.
fn plan_user(
    number: usize,
    j: usize,
    domain: &str,
    status: BillingStatus,
    stale: bool,
    customer_created: DateTime<Utc>,
    customer_activity: Option<DateTime<Utc>>,
) -> DemoUser {
    let first = FIRST_NAMES[number % FIRST_NAMES.len()];
    let last = LAST_NAMES[(number * 7 + 3) % LAST_NAMES.len()];
    let stage = match status {
        PAYING if stale => "inactive",
        PAYING => PAYING_STAGES[j % PAYING_STAGES.len()],
        TRIALING => TRIAL_STAGES[j % TRIAL_STAGES.len()],
        CHURNED => "inactive",
        // Free accounts: only the one that ever showed activity has a signed-up user.
        _ if j == 0 && customer_activity.is_some() => "signed_up",
        _ => "discovered",
    };
    let jj = j as i64;
    let created_at = customer_created + days(1 + 3 * jj) + hours(jj);
    let last_activity_at = match stage {
        "discovered" => None,
        "signed_up" => Some(created_at + hours(1)),
        "inactive" => customer_activity.map(|t| t.min(created_at + days(2))),
        _ => customer_activity.map(|t| t - hours(20 * jj)),
    }
    .filter(|t| *t >= created_at);
    DemoUser {
        id: new_id(),
        number,
        first,
        name: format!("{first} {last}"),
        email: format!("{}.{}@{domain}", first.to_lowercase(), last.to_lowercase()),
        role: USER_ROLES[j % USER_ROLES.len()],
        title: JOB_TITLES[number % JOB_TITLES.len()],
        stage,
        created_at,
        last_activity_at,
    }
}

fn customer_record(c: &DemoCustomer) -> ImportRecord {
    let traits = json!({
        "plan": c.plan,
        "industry": c.industry,
        "seats": c.seats,
        "region": c.region,
    });
    ImportRecord::Customer(CustomerRecord {
        name: Some(c.name.to_string()),
        domain: Some(c.domain.to_string()),
        external_id: Some(customer_external_id(c)),
        billing_status: Some(c.status.to_string()),
        mrr_cents: Some(c.mrr_cents),
        traits: traits.as_object().cloned(),
        last_activity_at: c.last_activity_at,
        created_at: Some(c.created_at),
    })
}

async fn seed_billing_history(
    txn: &DatabaseTransaction,
    org_id: &str,
    customers: &[DemoCustomer],
) -> Result<()> {
    let rows = customers.iter().flat_map(|c| {
        c.history
            .iter()
            .map(|&(at, status, mrr)| billing_change::ActiveModel {
                id: Set(new_id()),
                organization_id: Set(org_id.to_string()),
                customer_id: Set(c.id.clone()),
                at: Set(at),
                billing_status: Set(status),
                mrr_cents: Set(mrr),
                origin: Set("import".to_string()),
            })
    });
    insert_rows(txn, rows.collect()).await
}

fn user_record(c: &DemoCustomer, u: &DemoUser) -> ImportRecord {
    let traits = json!({ "role": u.role, "title": u.title });
    ImportRecord::User(UserRecord {
        customer: Some(c.domain.to_string()),
        email: Some(u.email.clone()),
        external_id: Some(user_external_id(u)),
        name: Some(u.name.clone()),
        stage: Some(u.stage.to_string()),
        traits: traits.as_object().cloned(),
        last_activity_at: u.last_activity_at,
        created_at: Some(u.created_at),
    })
}

fn workspace_user_records(now: DateTime<Utc>) -> Vec<ImportRecord> {
    WORKSPACE_USERS
        .iter()
        .enumerate()
        .map(|(i, &(name, email, role))| {
            ImportRecord::WorkspaceUser(WorkspaceUserRecord {
                name: name.to_string(),
                email: email.to_string(),
                role: role.to_string(),
                created_at: Some(now - days(125 - 2 * i as i64)),
            })
        })
        .collect()
}

/// A source about to be imported, with the facts extracted from it.
struct PlannedSource {
    source: SourceRecord,
    facts: Vec<FactRecord>,
}

/// The `s`th source of `kind` (the `k`th kind): a template, filled for a customer it fits.
fn plan_source(
    customers: &[DemoCustomer],
    kind: &SourceKind,
    k: usize,
    s: usize,
    now: DateTime<Utc>,
) -> Result<PlannedSource> {
    let template = &kind.templates[s % kind.templates.len()];
    let fitting: Vec<&DemoCustomer> = customers
        .iter()
        .filter(|c| template.statuses.contains(&c.status) && c.users.len() >= 2)
        .collect();
    ensure!(
        !fitting.is_empty(),
        "no demo customer fits the source template `{}`",
        template.title
    );
    let c = fitting[(s * 3 + k * 2) % fitting.len()];
    let ours = match kind.source_type {
        "SUPPORT_TICKET" => SUPPORT_DESK,
        "OPPORTUNITY" => {
            let (name, email, _) = WORKSPACE_USERS[ACCOUNT_OWNER];
            (name, email)
        }
        _ => {
            let (name, email, _) = WORKSPACE_USERS[c.index % 2];
            (name, email)
        }
    };
    let vars = source_vars(c, ours)?;

    // Conversations fall inside the customer's life: after sign-up, before churn.
    let latest = c.churned_at.unwrap_or(now);
    let span_days = ((latest - c.created_at).num_days() - 2).max(1);
    let offset = ((s * 17 + k * 11) as i64) % span_days;
    let occurred_at = latest - days(1 + offset) - hours(1 + ((s + k) % 8) as i64);

    let source_id = format!("{}_{:03}", kind.id_prefix, s + 1);
    let body = fill(&template.lines.join("\n"), &vars);
    // Two conversations in three were synced from the CRM and link back to it.
    let permalink =
        (s % 3 != 2).then(|| format!("https://app.example-crm.com/{}/{source_id}", kind.link_path));
    let contacts: Vec<&str> = c.users.iter().take(2).map(|u| u.email.as_str()).collect();
    let participants: Vec<&str> = std::iter::once(ours.1).chain(contacts).collect();
    let created_at = occurred_at + Duration::minutes(10);

    let mut facts = Vec::new();
    for (n, f) in template.facts.iter().enumerate() {
        let quote = fill(f.quote, &vars);
        ensure!(
            body.contains(&quote),
            "demo quote `{quote}` is not in the body of {source_id}"
        );
        facts.push(FactRecord {
            customer: c.domain.to_string(),
            text: fill(f.text, &vars),
            status: Some(f.status.to_string()),
            source_type: kind.source_type.to_string(),
            source_id: source_id.clone(),
            source_quote: quote,
            permalink: permalink.clone(),
            created_at: Some(created_at + Duration::minutes(5 + n as i64)),
        });
    }

    let source = SourceRecord {
        source_type: kind.source_type.to_string(),
        source_id,
        customer: Some(c.domain.to_string()),
        title: fill(template.title, &vars),
        body,
        occurred_at,
        permalink,
        participants: participants.into_iter().map(str::to_string).collect(),
        created_at: Some(created_at),
    };
    Ok(PlannedSource { source, facts })
}

/// Values of the `{placeholders}` in source templates, for one customer and our contact.
fn source_vars(c: &DemoCustomer, ours: (&str, &str)) -> Result<Vec<(&'static str, String)>> {
    let (contact, contact2) = match c.users.as_slice() {
        [a, b, ..] => (a, b),
        _ => return Err(anyhow!("demo customer {} has fewer than two users", c.name)),
    };
    let seats_add = ((c.seats / 2 + 4) / 5 * 5).max(5);
    // Trials and free accounts have no revenue yet: estimate the deal at $50 a seat a month.
    let arr_dollars = if c.mrr_cents > 0 {
        c.mrr_cents * 12 / 100
    } else {
        c.seats.max(10) * 600
    };
    let ours_first = ours.0.split(' ').next().unwrap_or(ours.0);
    Ok(vec![
        ("company", c.name.to_string()),
        ("domain", c.domain.to_string()),
        ("plan", capitalized(c.plan)),
        ("seats", c.seats.to_string()),
        ("seats_add", seats_add.to_string()),
        ("seats_half", (seats_add / 2).max(1).to_string()),
        ("seats_total", (c.seats + seats_add).to_string()),
        ("arr", usd(arr_dollars)),
        ("expansion", usd(seats_add * 720)),
        ("contact", contact.name.clone()),
        ("contact_first", contact.first.to_string()),
        ("contact_email", contact.email.clone()),
        ("contact2", contact2.name.clone()),
        ("contact2_first", contact2.first.to_string()),
        ("contact2_email", contact2.email.clone()),
        ("ours", ours.0.to_string()),
        ("ours_first", ours_first.to_string()),
        ("ours_email", ours.1.to_string()),
    ])
}

/// Replaces every `{name}` of `vars` in `template`.
fn fill(template: &str, vars: &[(&str, String)]) -> String {
    vars.iter()
        .fold(template.to_string(), |text, (name, value)| {
            text.replace(&format!("{{{name}}}"), value)
        })
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Whole dollars as `$48,000`.
fn usd(dollars: i64) -> String {
    let digits = dollars.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    format!("${out}")
}

/// Tracked events of the active users (pageviews, custom events, identifies) and of their
/// accounts (billing), each at or before its user's last activity, plus the visitors they
/// came from.
async fn seed_events(
    txn: &DatabaseTransaction,
    org_id: &str,
    customers: &[DemoCustomer],
) -> Result<()> {
    let active: Vec<(&DemoCustomer, &DemoUser, DateTime<Utc>)> = customers
        .iter()
        .flat_map(|c| c.users.iter().map(move |u| (c, u)))
        .filter(|(_, u)| matches!(u.stage, "engaged" | "activated"))
        .filter_map(|(c, u)| u.last_activity_at.map(|at| (c, u, at)))
        .collect();
    ensure!(
        !active.is_empty(),
        "no active demo users to attach events to"
    );

    // visitor id, customer id, first seen, last seen; keyed by user id.
    let mut visitors: HashMap<&str, (String, &str, DateTime<Utc>, DateTime<Utc>)> = HashMap::new();
    let mut rows = Vec::new();
    for e in 0..EVENT_COUNT {
        let (c, u, last) = active[(e * 7) % active.len()];
        let n = e as i64;
        let occurred_at = last - hours(n % 6) - Duration::minutes((n * 13) % 50);
        let variant = e / 8 + e;
        let (event_type, event_name, path, data) = match e % 8 {
            0..=3 => {
                let (path, title) = PAGES[variant % PAGES.len()];
                let data = json!({ "title": title, "referrer": format!("{APP_ORIGIN}/dashboard") });
                ("pageview", None, path, data)
            }
            4 | 5 => {
                let (name, path) = CUSTOM_EVENTS[variant % CUSTOM_EVENTS.len()];
                ("custom", Some(name), path, custom_event_data(name, c))
            }
            6 => {
                let data =
                    json!({ "traits": { "email": u.email, "name": u.name, "role": u.role } });
                ("identify", None, "/dashboard", data)
            }
            _ => {
                let data = json!({
                    "billingStatus": c.status.as_str(),
                    "mrrCents": c.mrr_cents,
                    "plan": c.plan,
                });
                ("billing", None, "/settings/billing", data)
            }
        };
        // Billing events come from the billing system, not from a browser or a user.
        let (visitor_id, user_id) = if event_type == "billing" {
            (None, None)
        } else {
            let entry = visitors
                .entry(u.id.as_str())
                .or_insert_with(|| (new_id(), c.id.as_str(), occurred_at, occurred_at));
            entry.2 = entry.2.min(occurred_at);
            entry.3 = entry.3.max(occurred_at);
            (Some(entry.0.clone()), Some(u.id.clone()))
        };
        rows.push(event::ActiveModel {
            id: Set(new_id()),
            organization_id: Set(org_id.to_string()),
            message_id: Set(None),
            event_type: Set(event_type.to_string()),
            event_name: Set(event_name.map(str::to_string)),
            visitor_id: Set(visitor_id),
            user_id: Set(user_id),
            customer_id: Set(Some(c.id.clone())),
            url: Set(format!("{APP_ORIGIN}{path}")),
            path: Set(path.to_string()),
            occurred_at: Set(occurred_at),
            received_at: Set(occurred_at + Duration::seconds(1 + n % 3)),
            data: Set(data),
        });
    }
    insert_rows(txn, rows).await?;

    let visitor_rows = visitors.into_iter().map(
        |(user_id, (visitor_id, customer_id, first_seen, last_seen))| visitor::ActiveModel {
            id: Set(new_id()),
            organization_id: Set(org_id.to_string()),
            visitor_id: Set(visitor_id),
            user_id: Set(Some(user_id.to_string())),
            customer_id: Set(Some(customer_id.to_string())),
            first_seen_at: Set(first_seen),
            last_seen_at: Set(last_seen),
        },
    );
    insert_rows(txn, visitor_rows.collect()).await
}

/// Properties of a custom event, shaped so the demo signals' conditions can match them.
fn custom_event_data(name: &str, c: &DemoCustomer) -> Value {
    match name {
        "seat_limit_reached" => json!({ "plan": c.plan, "seats": c.seats, "limit": c.seats }),
        "export_failed" => json!({ "errorCode": "E_EXPORT_TIMEOUT", "rows": 400_000 }),
        "pricing_viewed" => {
            json!({ "plan": c.plan, "seats": c.seats, "path": "/settings/billing" })
        }
        "report_created" => json!({ "reportType": "weekly_health" }),
        _ => json!({ "provider": "salesforce" }),
    }
}
