//! Demo data: fills one organization with a small, realistic B2B SaaS book of business
//! (customers with billing history, their users, conversations with provenance-backed facts,
//! tracked events) and the platform configuration around it (agents, signals, destinations,
//! automations).
//!
//! Everything is derived from the hand-written tables below, varied by index, so every run has
//! the same shape; only ids (random UUIDs), secrets and timestamps (relative to now) differ.
//! Keys are unique per organization only, so several organizations can be seeded in one
//! database.

use std::collections::HashMap;

use anyhow::{anyhow, ensure, Result};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{ActiveModelTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, Set};
use serde_json::{json, Value};

use crate::crypto::{mask, SecretBox};
use crate::import::{
    self, CustomerRecord, FactRecord, ImportRecord, SourceRecord, UserRecord, WorkspaceUserRecord,
};
use crate::platform::{config_hash, destinations::new_signing_secret, SCHEMA_VERSION};
use entity::{
    agent, automation, automation_destination, automation_signal, billing_change,
    customer::BillingStatus, destination, event, signal, visitor,
};

const PAYING: &str = BillingStatus::Paying.as_str();
const TRIALING: &str = BillingStatus::Trialing.as_str();
const CHURNED: &str = BillingStatus::Churned.as_str();
const NONE: &str = BillingStatus::None.as_str();

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
const STATUS_CYCLE: [&str; 7] = [PAYING, PAYING, TRIALING, PAYING, CHURNED, PAYING, NONE];

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

/// One kind of conversation source and the templates its rows are written from.
struct SourceKind {
    source_type: &'static str,
    id_prefix: &'static str,
    /// Path segment of the CRM permalink.
    link_path: &'static str,
    count: usize,
    templates: &'static [SourceTemplate],
}

/// A conversation written from `{placeholder}` text (see `source_vars`). Its facts quote a
/// piece of one line, so every quote is a verbatim substring of the body.
struct SourceTemplate {
    title: &'static str,
    /// Billing statuses of the customers this conversation fits.
    statuses: &'static [&'static str],
    lines: &'static [&'static str],
    facts: &'static [FactTemplate],
}

struct FactTemplate {
    text: &'static str,
    quote: &'static str,
    status: &'static str,
}

const fn fact_of(text: &'static str, quote: &'static str, status: &'static str) -> FactTemplate {
    FactTemplate {
        text,
        quote,
        status,
    }
}

const ACTIVE: &str = "ACTIVE";
const SUPERSEDED: &str = "SUPERSEDED";
const RETRACTED: &str = "RETRACTED";

const CALLS: &[SourceTemplate] = &[
    SourceTemplate {
        title: "QBR with {company}",
        statuses: &[PAYING],
        lines: &[
            "[00:02:14] {ours_first}: Thanks for making time. Let's start with how the rollout is going.",
            "[00:02:31] {contact_first}: Honestly it's going well. The support team lives in the dashboard now and the weekly report replaced two spreadsheets.",
            "[00:04:05] {contact_first}: The big thing for next quarter is headcount. We're hiring in the EMEA office and plan to add {seats_add} seats in Q1.",
            "[00:05:40] {ours_first}: Great. Anything blocking that?",
            "[00:05:52] {contact_first}: Procurement wants SSO enforced before we go past {seats} seats, so SAML is a hard requirement.",
        ],
        facts: &[
            fact_of(
                "{company} plans to add {seats_add} seats in Q1",
                "plan to add {seats_add} seats in Q1",
                ACTIVE,
            ),
            fact_of(
                "{company} requires SAML SSO before growing past {seats} seats",
                "Procurement wants SSO enforced before we go past {seats} seats, so SAML is a hard requirement.",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "Renewal check-in: {company}",
        statuses: &[PAYING],
        lines: &[
            "[00:01:10] {ours_first}: Your renewal is coming up in about two months. How is the team feeling?",
            "[00:01:25] {contact_first}: Mixed, to be honest. Usage dropped after our champion, {contact2_first}, moved to another team.",
            "[00:02:48] {contact_first}: Leadership asked me to compare a couple of alternatives before we sign again.",
            "[00:03:30] {ours_first}: Understood. Would a refreshed onboarding for the new admins help?",
            "[00:03:41] {contact_first}: Yes, if we can do it before the end of the month. Budget approval closes on the 28th.",
        ],
        facts: &[
            fact_of(
                "{company}'s champion {contact2_first} moved to another team and usage dropped",
                "Usage dropped after our champion, {contact2_first}, moved to another team.",
                ACTIVE,
            ),
            fact_of(
                "{company} is comparing alternatives before renewing",
                "Leadership asked me to compare a couple of alternatives before we sign again.",
                ACTIVE,
            ),
            fact_of(
                "{company}'s budget approval for the renewal closes on the 28th",
                "Budget approval closes on the 28th.",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "Discovery call with {company}",
        statuses: &[TRIALING, NONE],
        lines: &[
            "[00:00:45] {ours_first}: What made you start looking at OurCo?",
            "[00:01:02] {contact_first}: We track customer health in a spreadsheet today and it's always a week stale.",
            "[00:02:20] {contact_first}: We use Salesforce as the CRM and Zendesk for support, so both integrations matter.",
            "[00:03:15] {contact2_first}: Security review needs the SOC 2 report and a DPA before any contract.",
            "[00:04:02] {ours_first}: I'll send both today.",
        ],
        facts: &[
            fact_of(
                "{company} tracks customer health in a spreadsheet today",
                "We track customer health in a spreadsheet today",
                ACTIVE,
            ),
            fact_of(
                "{company} uses Salesforce and Zendesk",
                "We use Salesforce as the CRM and Zendesk for support",
                ACTIVE,
            ),
            fact_of(
                "{company} needs the SOC 2 report and a DPA before signing",
                "Security review needs the SOC 2 report and a DPA before any contract.",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "Escalation call: {company} data sync",
        statuses: &[PAYING],
        lines: &[
            "[00:00:30] {contact_first}: The nightly sync missed two days of events last week and our Monday report was wrong.",
            "[00:01:50] {ours_first}: That matches what engineering found: a timeout in the export job. The fix shipped Thursday.",
            "[00:02:40] {contact_first}: Okay. I told my VP we were looking at replacing the tool, but if it's fixed we're fine.",
            "[00:03:05] {contact_first}: Please keep us posted on the root-cause write-up.",
        ],
        facts: &[
            fact_of(
                "{company} lost two days of synced events to an export timeout",
                "The nightly sync missed two days of events last week",
                ACTIVE,
            ),
            // Extracted out of context: the customer said they stay once the fix is in.
            fact_of(
                "{company} is replacing OurCo",
                "I told my VP we were looking at replacing the tool",
                RETRACTED,
            ),
            fact_of(
                "{company} expects a root-cause write-up for the sync incident",
                "Please keep us posted on the root-cause write-up.",
                ACTIVE,
            ),
        ],
    },
];

const EMAILS: &[SourceTemplate] = &[
    SourceTemplate {
        title: "Re: Seat expansion for {company}",
        statuses: &[PAYING],
        lines: &[
            "From: {contact_email}",
            "To: {ours_email}",
            "Hi {ours_first}, following up on our call: we want to add {seats_add} seats for the new support pod starting next month.",
            "---",
            "From: {contact_email}",
            "To: {ours_email}",
            "Small correction after talking to finance: we'll start with {seats_half} seats and add the rest next quarter.",
            "Can you send an updated quote for the {plan} plan?",
        ],
        facts: &[
            fact_of(
                "{company} will add {seats_add} seats next month",
                "we want to add {seats_add} seats for the new support pod starting next month.",
                SUPERSEDED,
            ),
            fact_of(
                "{company} will add {seats_half} seats now and the rest next quarter",
                "we'll start with {seats_half} seats and add the rest next quarter.",
                ACTIVE,
            ),
            fact_of(
                "{company} asked for an updated quote for the {plan} plan",
                "Can you send an updated quote for the {plan} plan?",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "Invoice question from {company}",
        statuses: &[PAYING],
        lines: &[
            "From: {contact2_email}",
            "Hi team, our last invoice shows {seats} seats but we deactivated six users last month. Can you check?",
            "---",
            "From: {ours_email}",
            "Hi {contact2_first}, you're right: the seat count syncs at the start of the billing cycle. We'll issue a credit on the next invoice.",
            "---",
            "From: {contact2_email}",
            "Thanks. Going forward, please send invoices to ap@{domain} instead of me.",
        ],
        facts: &[
            fact_of(
                "{company} gets a seat credit on its next invoice",
                "We'll issue a credit on the next invoice.",
                ACTIVE,
            ),
            fact_of(
                "{company} wants invoices sent to ap@{domain}",
                "please send invoices to ap@{domain} instead of me",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "New VP of Customer Success at {company}",
        statuses: &[PAYING, TRIALING],
        lines: &[
            "From: {contact_email}",
            "To: {ours_email}",
            "Hi {ours_first}, quick note: {contact2} is joining as our VP of Customer Success next week and will own the relationship with you.",
            "{contact2_first} wants to see the health dashboards before our next QBR.",
            "---",
            "From: {ours_email}",
            "Welcome {contact2_first}! I'll set up a walkthrough for Tuesday.",
        ],
        facts: &[
            fact_of(
                "{contact2} is {company}'s new VP of Customer Success and owns the relationship",
                "{contact2} is joining as our VP of Customer Success next week and will own the relationship with you.",
                ACTIVE,
            ),
            fact_of(
                "{contact2_first} wants to review health dashboards before the next QBR",
                "{contact2_first} wants to see the health dashboards before our next QBR.",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "Cancellation notice from {company}",
        statuses: &[CHURNED],
        lines: &[
            "From: {contact_email}",
            "To: {ours_email}",
            "Hi {ours_first}, after a lot of discussion we've decided not to renew at the end of the current term.",
            "The main reason is budget: the team was cut by half and we can't justify {seats} seats.",
            "We may come back next year once hiring restarts.",
            "---",
            "From: {ours_email}",
            "Sorry to hear that, {contact_first}. I'll make sure you can export all data before the term ends.",
        ],
        facts: &[
            fact_of(
                "{company} decided not to renew at the end of its term",
                "we've decided not to renew at the end of the current term.",
                ACTIVE,
            ),
            fact_of(
                "{company} churned over budget after halving its team",
                "The main reason is budget: the team was cut by half",
                ACTIVE,
            ),
            fact_of(
                "{company} may return next year once hiring restarts",
                "We may come back next year once hiring restarts.",
                ACTIVE,
            ),
        ],
    },
];

const MEETINGS: &[SourceTemplate] = &[
    SourceTemplate {
        title: "{company} <> OurCo: Quarterly Business Review",
        statuses: &[PAYING],
        lines: &[
            "Agenda:",
            "1. Adoption review: active users and weekly report usage.",
            "2. Roadmap preview: Slack alerts and the HubSpot integration.",
            "3. Expansion: {contact_first} wants to discuss rolling out to the finance team.",
            "4. Open support tickets and the SSO timeline.",
        ],
        facts: &[fact_of(
            "{company} wants to discuss rolling out to its finance team",
            "{contact_first} wants to discuss rolling out to the finance team.",
            ACTIVE,
        )],
    },
    SourceTemplate {
        title: "Onboarding kickoff with {company}",
        statuses: &[TRIALING, PAYING],
        lines: &[
            "Goals for the session:",
            "- Connect the CRM and import accounts.",
            "- Configure the first churn-risk alert for the CS team.",
            "- Agree on success criteria: {seats} active users by day 30.",
            "Attendees from {company}: {contact}, {contact2}.",
        ],
        facts: &[fact_of(
            "{company}'s onboarding goal is {seats} active users by day 30",
            "Agree on success criteria: {seats} active users by day 30.",
            ACTIVE,
        )],
    },
    SourceTemplate {
        title: "Executive sponsor sync: {company}",
        statuses: &[PAYING],
        lines: &[
            "Purpose: align with {contact} on the renewal and multi-year pricing.",
            "- {company} is consolidating vendors this year and prefers a two-year term.",
            "- Review the security questionnaire responses.",
            "- Next step: draft an order form for the {plan} plan.",
        ],
        facts: &[fact_of(
            "{company} prefers a two-year term while consolidating vendors",
            "{company} is consolidating vendors this year and prefers a two-year term.",
            ACTIVE,
        )],
    },
    SourceTemplate {
        title: "Training: reports for {company} team leads",
        statuses: &[PAYING, TRIALING],
        lines: &[
            "Session for the {company} team leads, recorded for those who cannot attend.",
            "- Building a weekly health report.",
            "- Sharing dashboards with executives.",
            "Note from {contact_first}: eight managers will attend, mostly from the London office.",
        ],
        facts: &[fact_of(
            "Eight {company} managers attend the report training, mostly from London",
            "eight managers will attend, mostly from the London office.",
            ACTIVE,
        )],
    },
];

const TICKETS: &[SourceTemplate] = &[
    SourceTemplate {
        title: "CSV export times out for large reports",
        statuses: &[PAYING],
        lines: &[
            "{contact} (customer): Exporting the monthly usage report to CSV spins for a few minutes and then fails with a timeout.",
            "{ours} (agent): Thanks for the report. How many rows does the report have?",
            "{contact} (customer): Around 400,000 rows. It worked last month.",
            "{ours} (agent): Confirmed, exports above 250,000 rows hit the timeout. Engineering is on it; meanwhile, filtering by month works.",
            "{contact} (customer): The workaround is fine for now, but this blocks our board reporting at quarter end.",
        ],
        facts: &[
            fact_of(
                "{company} cannot export reports above 250,000 rows",
                "exports above 250,000 rows hit the timeout",
                ACTIVE,
            ),
            fact_of(
                "The export timeout blocks {company}'s quarter-end board reporting",
                "this blocks our board reporting at quarter end",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "SSO login loop after identity provider change",
        statuses: &[PAYING, TRIALING],
        lines: &[
            "{contact2} (customer): Since we moved from Okta to Entra ID, users get redirected back to the login page.",
            "{ours} (agent): The SAML certificate on your connection is still the Okta one. Could you upload the new metadata?",
            "{contact2} (customer): Done, it works now. All {seats} users can log in again.",
        ],
        facts: &[
            fact_of(
                "{company} moved its identity provider from Okta to Entra ID",
                "Since we moved from Okta to Entra ID",
                ACTIVE,
            ),
            fact_of(
                "{company}'s users are stuck in an SSO login loop",
                "users get redirected back to the login page",
                SUPERSEDED,
            ),
            fact_of(
                "{company}'s SSO login works again for all {seats} users",
                "Done, it works now. All {seats} users can log in again.",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "Feature request: Slack alerts per account owner",
        statuses: &[PAYING, TRIALING],
        lines: &[
            "{contact} (customer): Can alerts be routed to the Slack channel of each account owner instead of one shared channel?",
            "{ours} (agent): Not today. I've logged it as a feature request and linked your account.",
            "{contact} (customer): Thanks. This would help us roll the product out to the sales team, roughly 15 more people.",
        ],
        facts: &[
            fact_of(
                "{company} wants Slack alerts routed per account owner",
                "Can alerts be routed to the Slack channel of each account owner instead of one shared channel?",
                ACTIVE,
            ),
            fact_of(
                "Per-owner Slack routing would let {company} add about 15 sales users",
                "roll the product out to the sales team, roughly 15 more people",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "Full data export before contract end",
        statuses: &[CHURNED],
        lines: &[
            "{contact} (customer): Our contract ends next month and we need a full export of accounts, users and notes.",
            "{ours} (agent): The full export is under Settings > Data. For files over 1 GB we send a signed download link instead.",
            "{contact} (customer): Please send the link to {contact2_email} as well, {contact2_first} is running the migration.",
        ],
        facts: &[fact_of(
            "{company} needs a full data export before its contract ends",
            "Our contract ends next month and we need a full export of accounts, users and notes.",
            ACTIVE,
        )],
    },
];

const OPPORTUNITIES: &[SourceTemplate] = &[
    SourceTemplate {
        title: "{company} - Expansion to {seats_total} seats",
        statuses: &[PAYING],
        lines: &[
            "Amount: {expansion} ARR",
            "Stage: Negotiation (moved from Proposal on Monday)",
            "Owner: {ours}",
            "Notes: {contact} confirmed budget for {seats_add} additional seats. Legal is reviewing the updated DPA.",
            "Risk: procurement asked for a 15% discount on a multi-year term.",
        ],
        facts: &[
            fact_of(
                "{company} confirmed budget for {seats_add} additional seats ({expansion} ARR)",
                "{contact} confirmed budget for {seats_add} additional seats.",
                ACTIVE,
            ),
            fact_of(
                "{company}'s procurement asked for a 15% multi-year discount",
                "procurement asked for a 15% discount on a multi-year term.",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "{company} - Renewal",
        statuses: &[PAYING],
        lines: &[
            "Amount: {arr} ARR",
            "Stage: Commit",
            "Owner: {ours}",
            "Close date: originally this month, now pushed to next month because of a budget freeze.",
            "Notes: renewal at the current seat count ({seats}); upsell to Enterprise deferred to H2.",
        ],
        facts: &[
            fact_of(
                "{company}'s {arr} renewal closes this month",
                "originally this month",
                SUPERSEDED,
            ),
            fact_of(
                "{company}'s renewal slipped to next month because of a budget freeze",
                "now pushed to next month because of a budget freeze",
                ACTIVE,
            ),
            fact_of(
                "{company} deferred an Enterprise upgrade to H2",
                "upsell to Enterprise deferred to H2",
                ACTIVE,
            ),
        ],
    },
    SourceTemplate {
        title: "{company} - New business ({plan})",
        statuses: &[TRIALING, NONE],
        lines: &[
            "Amount: {arr} ARR",
            "Stage: Proposal",
            "Owner: {ours}",
            "Next step: security review with {contact2} and a pricing call with {contact}.",
            "Competition: the incumbent is a homegrown spreadsheet; they are also talking to one other vendor.",
        ],
        facts: &[
            fact_of(
                "{company} has a {arr} ARR {plan} deal in Proposal",
                "Amount: {arr} ARR",
                ACTIVE,
            ),
            fact_of(
                "{company} is also evaluating one other vendor",
                "they are also talking to one other vendor",
                ACTIVE,
            ),
        ],
    },
];

const SOURCE_KINDS: [SourceKind; 5] = [
    SourceKind {
        source_type: "CALL",
        id_prefix: "call",
        link_path: "calls",
        count: 7,
        templates: CALLS,
    },
    SourceKind {
        source_type: "EMAIL",
        id_prefix: "email",
        link_path: "emails",
        count: 7,
        templates: EMAILS,
    },
    SourceKind {
        source_type: "CALENDAR_EVENT",
        id_prefix: "cal",
        link_path: "meetings",
        count: 7,
        templates: MEETINGS,
    },
    SourceKind {
        source_type: "SUPPORT_TICKET",
        id_prefix: "ticket",
        link_path: "tickets",
        count: 7,
        templates: TICKETS,
    },
    SourceKind {
        source_type: "OPPORTUNITY",
        id_prefix: "opp",
        link_path: "opportunities",
        count: 6,
        templates: OPPORTUNITIES,
    },
];

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
    status: &'static str,
    plan: &'static str,
    seats: i64,
    mrr_cents: i64,
    created_at: DateTime<Utc>,
    /// When the customer stopped paying; conversations with it happen before this.
    churned_at: Option<DateTime<Utc>>,
    last_activity_at: Option<DateTime<Utc>>,
    /// (at, billing status, MRR in cents), oldest first; the last entry is the current state.
    history: Vec<(DateTime<Utc>, &'static str, i64)>,
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
    status: &'static str,
    created_at: DateTime<Utc>,
    churned_at: Option<DateTime<Utc>>,
    paid_mrr: i64,
    k: i64,
    now: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, &'static str, i64)> {
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
    status: &str,
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
                billing_status: Set(status.to_string()),
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
        if i > 0 && (digits.len() - i) % 3 == 0 {
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
                    "billingStatus": c.status,
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

async fn seed_agents(
    txn: &DatabaseTransaction,
    org_id: &str,
    now: DateTime<Utc>,
) -> Result<HashMap<&'static str, String>> {
    struct AgentSpec {
        key: &'static str,
        name: &'static str,
        instructions: &'static str,
        actions: &'static [&'static str],
        cron: &'static str,
        enabled: bool,
        next_run: Option<Duration>,
        last_run: Option<Duration>,
        last_success: Option<Duration>,
    }
    let specs = [
        AgentSpec {
            key: "churn-watch",
            name: "Churn Watch",
            instructions: "You watch for churn risk. When an automation hands you an account \
                           (its subject, signals and recent events), look it up with \
                           svc_get_customer (users, revenue, facts) and its recent timeline, \
                           then write the alert for the CS channel: what happened, why it \
                           matters for this account (MRR, billing status, open issues), and one \
                           next step, citing the facts you relied on. Tag the account \
                           `churn-risk` when the evidence is clear. On your morning schedule, \
                           review paying customers whose activity dropped or who raised an \
                           escalation in the last 14 days and summarize each risk in two \
                           sentences. Never contact customers directly.",
            actions: &["notify_destination", "tag_customer"],
            cron: "0 8 * * *",
            enabled: true,
            next_run: Some(hours(14)),
            last_run: Some(hours(10)),
            last_success: Some(hours(10)),
        },
        // Its last run failed, so the last successful run is a week older.
        AgentSpec {
            key: "expansion-scout",
            name: "Expansion Scout",
            instructions: "Once a week, find accounts that hit their seat limit, viewed pricing \
                           or mentioned new teams or headcount. For each, state the expansion \
                           opportunity and its evidence, and open a CRM task for the account \
                           owner.",
            actions: &["notify_destination", "create_crm_task"],
            cron: "0 9 * * 1",
            enabled: true,
            next_run: Some(days(3)),
            last_run: Some(days(4)),
            last_success: Some(days(11)),
        },
        AgentSpec {
            key: "weekly-digest",
            name: "Weekly Digest",
            instructions: "Write a short Friday digest for leadership: new customers, churn, \
                           notable facts from calls and tickets, and the accounts that need \
                           attention next week.",
            actions: &["notify_destination"],
            cron: "0 7 * * 5",
            enabled: false,
            next_run: None,
            last_run: None,
            last_success: None,
        },
    ];
    let mut ids = HashMap::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let id = new_id();
        let created_at = now - days(100 - 5 * i as i64);
        let last_run_at = spec.last_run.map(|d| now - d);
        agent::ActiveModel {
            id: Set(id.clone()),
            organization_id: Set(org_id.to_string()),
            agent_key: Set(spec.key.to_string()),
            display_name: Set(spec.name.to_string()),
            template_version: Set("2026.10".to_string()),
            instructions: Set(spec.instructions.to_string()),
            action_keys: Set(json!(spec.actions)),
            schedule_enabled: Set(spec.enabled),
            schedule_cron: Set(Some(spec.cron.to_string())),
            schedule_timezone: Set("UTC".to_string()),
            next_run_at: Set(spec.next_run.map(|d| now + d)),
            last_run_at: Set(last_run_at),
            last_successful_run_at: Set(spec.last_success.map(|d| now - d)),
            created_at: Set(created_at),
            updated_at: Set(last_run_at.unwrap_or(created_at)),
        }
        .insert(txn)
        .await?;
        ids.insert(spec.key, id);
    }
    Ok(ids)
}

async fn seed_signals(
    txn: &DatabaseTransaction,
    org_id: &str,
    now: DateTime<Utc>,
) -> Result<HashMap<&'static str, String>> {
    // (key, name, description, managed by, definition, archived days ago)
    let specs: [(&str, &str, &str, &str, Value, Option<i64>); 4] = [
        (
            "seat-limit-reached",
            "Seat limit reached",
            "A Pro account tried to add a user beyond its seat limit.",
            "CODE",
            json!({
                "grain": "customer",
                "subjectResolver": "customerId",
                "eventNames": ["seat_limit_reached"],
                "propertyConditions": [{ "property": "plan", "operator": "eq", "value": "pro" }],
                "conditionMode": "ALL",
            }),
            None,
        ),
        (
            "export-failures",
            "Export failures",
            "A user hit an error while exporting a report.",
            "UI",
            json!({
                "grain": "user",
                "subjectResolver": "email",
                "eventNames": ["export_failed", "report_export_failed"],
                "propertyConditions": [{ "property": "errorCode", "operator": "exists" }],
                "conditionMode": "ANY",
            }),
            None,
        ),
        (
            "pricing-interest",
            "Pricing interest",
            "A user of a larger account looked at pricing or compared plans.",
            "UI",
            json!({
                "grain": "user",
                "subjectResolver": "userId",
                "eventNames": ["pricing_viewed", "plan_compared"],
                "propertyConditions": [
                    { "property": "seats", "operator": "gte", "value": 25 },
                    { "property": "path", "operator": "contains", "value": "/billing" },
                ],
                "conditionMode": "ANY",
            }),
            None,
        ),
        (
            "legacy-trial-expiring",
            "Legacy trial expiring",
            "Replaced by billing-status audiences; kept for its history.",
            "UI",
            json!({
                "grain": "user",
                "subjectResolver": "visitorId",
                "eventNames": ["trial_expiring"],
                "propertyConditions": [
                    { "property": "plan", "operator": "neq", "value": "enterprise" },
                ],
                "conditionMode": "ALL",
            }),
            Some(30),
        ),
    ];
    let mut ids = HashMap::new();
    for (i, (key, name, description, managed_by, definition, archived)) in
        specs.into_iter().enumerate()
    {
        let id = new_id();
        let created_at = now - days(90 - 3 * i as i64);
        let archived_at = archived.map(|d| now - days(d));
        signal::ActiveModel {
            id: Set(id.clone()),
            organization_id: Set(org_id.to_string()),
            key: Set(key.to_string()),
            managed_by: Set(managed_by.to_string()),
            name: Set(name.to_string()),
            description: Set(Some(description.to_string())),
            kind: Set("EVENT_MATCH".to_string()),
            config_hash: Set(Some(config_hash(&definition))),
            definition: Set(definition),
            schema_version: Set(SCHEMA_VERSION.to_string()),
            archived_at: Set(archived_at),
            created_at: Set(created_at),
            updated_at: Set(archived_at.unwrap_or(created_at)),
        }
        .insert(txn)
        .await?;
        ids.insert(key, id);
    }
    Ok(ids)
}

async fn seed_destinations(
    txn: &DatabaseTransaction,
    secrets: &SecretBox,
    org_id: &str,
    now: DateTime<Utc>,
) -> Result<HashMap<&'static str, String>> {
    let slack_url = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX";
    let crm_secret = new_signing_secret();
    let staging_secret = new_signing_secret();
    // (key, name, description, kind, config, secret, enabled, default, updated days ago)
    let specs = [
        (
            "slack-cs-alerts",
            "#cs-alerts",
            "Churn and expansion alerts for the customer success team.",
            "SLACK_CHANNEL",
            json!({ "webhookUrl": mask(slack_url, 24) }),
            slack_url.to_string(),
            true,
            true,
            80,
        ),
        (
            "crm-webhook",
            "CRM sync webhook",
            "Pushes automation results to the CRM bridge running next to the demo.",
            "WEBHOOK_ENDPOINT",
            json!({
                "url": "http://localhost:9000/hooks/custintel",
                "signingSecret": mask(&crm_secret, 6),
            }),
            crm_secret,
            true,
            false,
            75,
        ),
        // Disabled after repeated delivery failures; the expansion digest still points here.
        (
            "staging-webhook",
            "Staging webhook",
            "Staging receiver, disabled until the endpoint is redeployed.",
            "WEBHOOK_ENDPOINT",
            json!({
                "url": "https://hooks.example.com/custintel",
                "signingSecret": mask(&staging_secret, 6),
            }),
            staging_secret,
            false,
            false,
            18,
        ),
    ];
    let mut ids = HashMap::new();
    for (i, (key, name, description, kind, config, secret, enabled, is_default, updated)) in
        specs.into_iter().enumerate()
    {
        let id = new_id();
        let created_at = now - days(85 - 5 * i as i64);
        let provider = if kind == "SLACK_CHANNEL" {
            "SLACK"
        } else {
            "WEBHOOK"
        };
        // Same hash input as destinations created through the API.
        let hash = config_hash(&json!({ "kind": kind, "config": config }));
        destination::ActiveModel {
            id: Set(id.clone()),
            organization_id: Set(org_id.to_string()),
            key: Set(key.to_string()),
            name: Set(name.to_string()),
            description: Set(Some(description.to_string())),
            provider: Set(provider.to_string()),
            kind: Set(kind.to_string()),
            enabled: Set(enabled),
            config: Set(config),
            secret_ciphertext: Set(Some(secrets.encrypt(&secret))),
            sync_status: Set("SYNCED".to_string()),
            last_synced_at: Set(Some(created_at)),
            provider_error_code: Set(None),
            provider_error_message: Set(None),
            is_default: Set(is_default),
            schema_version: Set(SCHEMA_VERSION.to_string()),
            config_hash: Set(Some(hash)),
            archived_at: Set(None),
            created_at: Set(created_at),
            updated_at: Set(now - days(updated)),
        }
        .insert(txn)
        .await?;
        ids.insert(key, id);
    }
    Ok(ids)
}

/// Looks up an id seeded earlier in this run by its key.
fn id_of(ids: &HashMap<&'static str, String>, key: &str) -> Result<String> {
    ids.get(key)
        .cloned()
        .ok_or_else(|| anyhow!("demo data has no `{key}`"))
}

async fn seed_automations(
    txn: &DatabaseTransaction,
    org_id: &str,
    agents: &HashMap<&'static str, String>,
    signals: &HashMap<&'static str, String>,
    destinations: &HashMap<&'static str, String>,
    now: DateTime<Utc>,
) -> Result<()> {
    struct AutomationSpec {
        key: &'static str,
        name: &'static str,
        description: &'static str,
        trigger_type: &'static str,
        trigger: Value,
        audience: Value,
        match_mode: &'static str,
        agent: Option<&'static str>,
        signals: &'static [&'static str],
        destinations: &'static [&'static str],
        archived_days_ago: Option<i64>,
        last_run: Option<(&'static str, i64)>,
    }
    let specs = [
        // Ready to go: an active signal and the enabled Slack channel.
        AutomationSpec {
            key: "churn-risk-alert",
            name: "Churn risk alert",
            description: "Alert the CS channel when a paying account keeps failing to export.",
            trigger_type: "SIGNAL_OCCURRENCE",
            trigger: json!({ "signalKeys": ["export-failures"] }),
            audience: json!({ "billingStatus": ["PAYING"], "minMrrCents": 49_900 }),
            match_mode: "ANY",
            agent: Some("churn-watch"),
            signals: &["export-failures"],
            destinations: &["slack-cs-alerts"],
            archived_days_ago: None,
            last_run: None,
        },
        AutomationSpec {
            key: "legacy-trial-nudge",
            name: "Legacy trial nudge",
            description: "Nudged expiring trials; replaced by the onboarding playbook.",
            trigger_type: "SIGNAL_OCCURRENCE",
            trigger: json!({ "signalKeys": ["legacy-trial-expiring"] }),
            audience: json!({ "billingStatus": ["TRIALING"] }),
            match_mode: "ANY",
            agent: None,
            signals: &["legacy-trial-expiring"],
            destinations: &["crm-webhook"],
            archived_days_ago: Some(30),
            last_run: Some(("DELIVERED", 35)),
        },
        // Its only destination is disabled, so it cannot be enabled until one is added.
        AutomationSpec {
            key: "expansion-digest",
            name: "Expansion digest",
            description: "Monday digest of accounts showing expansion intent.",
            trigger_type: "SCHEDULE",
            trigger: json!({ "cron": "0 9 * * 1" }),
            audience: json!({ "billingStatus": ["PAYING"], "plans": ["growth", "pro"] }),
            match_mode: "ALL",
            agent: Some("expansion-scout"),
            signals: &["seat-limit-reached", "pricing-interest"],
            destinations: &["staging-webhook"],
            archived_days_ago: None,
            last_run: Some(("FAILED", 18)),
        },
    ];
    for (i, spec) in specs.into_iter().enumerate() {
        let id = new_id();
        let agent_id = spec.agent.map(|key| id_of(agents, key)).transpose()?;
        // Same hash input as automations created through the API.
        let hash = config_hash(&json!({
            "triggerType": spec.trigger_type,
            "triggerJson": spec.trigger,
            "audienceFilterJson": spec.audience,
            "matchMode": spec.match_mode,
            "agentId": agent_id,
        }));
        let created_at = now - days(60 - 4 * i as i64);
        let archived_at = spec.archived_days_ago.map(|d| now - days(d));
        let last_run_at = spec.last_run.map(|(_, d)| now - days(d));
        automation::ActiveModel {
            id: Set(id.clone()),
            organization_id: Set(org_id.to_string()),
            key: Set(spec.key.to_string()),
            managed_by: Set("UI".to_string()),
            name: Set(spec.name.to_string()),
            description: Set(Some(spec.description.to_string())),
            enabled: Set(false),
            trigger_type: Set(spec.trigger_type.to_string()),
            trigger_json: Set(spec.trigger),
            audience_filter_json: Set(spec.audience),
            agent_id: Set(agent_id),
            match_mode: Set(spec.match_mode.to_string()),
            schema_version: Set(SCHEMA_VERSION.to_string()),
            config_hash: Set(Some(hash)),
            archived_at: Set(archived_at),
            last_run_at: Set(last_run_at),
            last_run_status: Set(spec.last_run.map(|(status, _)| status.to_string())),
            next_run_at: Set(None),
            created_at: Set(created_at),
            updated_at: Set(archived_at.or(last_run_at).unwrap_or(created_at)),
        }
        .insert(txn)
        .await?;

        let signal_links = spec
            .signals
            .iter()
            .map(|key| {
                Ok(automation_signal::ActiveModel {
                    automation_id: Set(id.clone()),
                    signal_id: Set(id_of(signals, key)?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        insert_rows(txn, signal_links).await?;
        let destination_links = spec
            .destinations
            .iter()
            .map(|key| {
                Ok(automation_destination::ActiveModel {
                    automation_id: Set(id.clone()),
                    destination_id: Set(id_of(destinations, key)?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        insert_rows(txn, destination_links).await?;
    }
    Ok(())
}
