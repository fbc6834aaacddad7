//! The demo's conversation sources (calls, emails, meetings, tickets, opportunities): the
//! templates their rows and facts are written from.

use super::*;

/// One kind of conversation source and the templates its rows are written from.
pub(super) struct SourceKind {
    pub(super) source_type: &'static str,
    pub(super) id_prefix: &'static str,
    /// Path segment of the CRM permalink.
    pub(super) link_path: &'static str,
    pub(super) count: usize,
    pub(super) templates: &'static [SourceTemplate],
}

/// A conversation written from `{placeholder}` text (see `source_vars`). Its facts quote a
/// piece of one line, so every quote is a verbatim substring of the body.
pub(super) struct SourceTemplate {
    pub(super) title: &'static str,
    /// Billing statuses of the customers this conversation fits.
    pub(super) statuses: &'static [BillingStatus],
    pub(super) lines: &'static [&'static str],
    pub(super) facts: &'static [FactTemplate],
}

pub(super) struct FactTemplate {
    pub(super) text: &'static str,
    pub(super) quote: &'static str,
    pub(super) status: FactStatus,
}

pub(super) const fn fact_of(
    text: &'static str,
    quote: &'static str,
    status: FactStatus,
) -> FactTemplate {
    FactTemplate {
        text,
        quote,
        status,
    }
}

pub(super) const ACTIVE: FactStatus = FactStatus::Active;
pub(super) const SUPERSEDED: FactStatus = FactStatus::Superseded;
pub(super) const RETRACTED: FactStatus = FactStatus::Retracted;

pub(super) const CALLS: &[SourceTemplate] = &[
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

pub(super) const EMAILS: &[SourceTemplate] = &[
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

pub(super) const MEETINGS: &[SourceTemplate] = &[
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

pub(super) const TICKETS: &[SourceTemplate] = &[
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

pub(super) const OPPORTUNITIES: &[SourceTemplate] = &[
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

pub(super) const SOURCE_KINDS: [SourceKind; 5] = [
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
