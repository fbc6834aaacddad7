//! The provider registry: the twelve providers this service can connect, how each connects, and
//! what each can do once connected.

/// How a provider is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupMode {
    /// Credentials sent in `config` on connect (or typed into the connect page).
    DirectApiKey,
    /// Only through the connect page in a browser.
    BrowserSession,
}

impl SetupMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SetupMode::DirectApiKey => "direct_api_key",
            SetupMode::BrowserSession => "browser_session",
        }
    }
}

/// One credential field a direct connection needs.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub key: &'static str,
    pub label: &'static str,
    pub secret: bool,
}

/// A follow-up step after connecting.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    pub id: &'static str,
    pub required: bool,
    /// Whether this service implements the step today.
    pub supported: bool,
}

/// A provider this service knows.
#[derive(Debug)]
pub struct Provider {
    pub id: &'static str,
    pub name: &'static str,
    pub category: &'static str,
    pub setup_mode: SetupMode,
    pub credential_type: &'static str,
    pub fields: &'static [Field],
    /// What the connection lets this service read, shown on the connect page.
    pub shares: &'static str,
    /// Models a background sync imports; empty when the provider has no sync yet.
    pub sync_models: &'static [&'static str],
    pub steps: &'static [Step],
}

impl Provider {
    /// The name the command line uses (`gmail` for `google-mail`).
    pub fn cli_name(&self) -> &'static str {
        if self.id == GOOGLE_MAIL {
            GMAIL_ALIAS
        } else {
            self.id
        }
    }

    pub fn has_sync(&self) -> bool {
        !self.sync_models.is_empty()
    }

    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }
}

pub const GOOGLE_MAIL: &str = "google-mail";
pub const GMAIL_ALIAS: &str = "gmail";
pub const STRIPE: &str = "stripe";

/// Credential type of providers connected through the connect page's authorization step.
const BROWSER_AUTHORIZATION: &str = "browser_authorization";

const fn field(key: &'static str, label: &'static str, secret: bool) -> Field {
    Field { key, label, secret }
}

const CRM_STEPS: &[Step] = &[Step {
    id: "mappings",
    required: false,
    supported: true,
}];
const CALL_STEPS: &[Step] = &[Step {
    id: "webhooks",
    required: false,
    supported: false,
}];
const STRIPE_STEPS: &[Step] = &[Step {
    id: "webhooks",
    required: false,
    supported: true,
}];

pub static PROVIDERS: &[Provider] = &[
    Provider {
        id: "hubspot",
        name: "HubSpot",
        category: "CRM",
        setup_mode: SetupMode::BrowserSession,
        credential_type: BROWSER_AUTHORIZATION,
        fields: &[],
        shares: "companies, contacts, deals and their pipelines",
        sync_models: &[],
        steps: CRM_STEPS,
    },
    Provider {
        id: "attio",
        name: "Attio",
        category: "CRM",
        setup_mode: SetupMode::BrowserSession,
        credential_type: BROWSER_AUTHORIZATION,
        fields: &[],
        shares: "companies, people, deals and their pipelines",
        sync_models: &[],
        steps: CRM_STEPS,
    },
    Provider {
        id: "slack",
        name: "Slack",
        category: "Communication",
        setup_mode: SetupMode::BrowserSession,
        credential_type: BROWSER_AUTHORIZATION,
        fields: &[],
        shares: "messages of the channels you add the app to",
        sync_models: &[],
        steps: &[],
    },
    Provider {
        id: "fireflies",
        name: "Fireflies",
        category: "Calls",
        setup_mode: SetupMode::DirectApiKey,
        credential_type: "api_key",
        fields: &[field("apiKey", "API key", true)],
        shares: "call recordings' transcripts, summaries and participants",
        sync_models: &[],
        steps: CALL_STEPS,
    },
    Provider {
        id: "granola",
        name: "Granola",
        category: "Calls",
        setup_mode: SetupMode::DirectApiKey,
        credential_type: "api_key",
        fields: &[field("apiKey", "API key", true)],
        shares: "meeting notes, transcripts and attendees",
        sync_models: &[],
        steps: CALL_STEPS,
    },
    Provider {
        id: "google-calendar",
        name: "Google Calendar",
        category: "Calendar",
        setup_mode: SetupMode::BrowserSession,
        credential_type: BROWSER_AUTHORIZATION,
        fields: &[],
        shares: "calendar events with their attendees (read only)",
        sync_models: &[],
        steps: &[],
    },
    Provider {
        id: GOOGLE_MAIL,
        name: "Gmail",
        category: "Communication",
        setup_mode: SetupMode::BrowserSession,
        credential_type: BROWSER_AUTHORIZATION,
        fields: &[],
        shares: "email messages with customers' domains (read only)",
        sync_models: &[],
        steps: &[],
    },
    Provider {
        id: "posthog",
        name: "PostHog",
        category: "Analytics",
        setup_mode: SetupMode::DirectApiKey,
        credential_type: "api_key",
        fields: &[
            field("apiKey", "Personal API key", true),
            field("region", "Region (us or eu)", false),
            field("projectId", "Project ID", false),
        ],
        shares: "product events and persons of one project",
        sync_models: &[],
        steps: &[],
    },
    Provider {
        id: STRIPE,
        name: "Stripe",
        category: "Billing",
        setup_mode: SetupMode::DirectApiKey,
        credential_type: "api_key",
        fields: &[field("apiKey", "Secret or restricted API key", true)],
        shares: "customers and subscriptions (billing status and MRR), read only",
        sync_models: &["customers", "subscriptions"],
        steps: STRIPE_STEPS,
    },
    Provider {
        id: "supabase",
        name: "Supabase",
        category: "Analytics",
        setup_mode: SetupMode::DirectApiKey,
        credential_type: "service_role_key",
        fields: &[
            field("projectUrl", "Project URL", false),
            field("serviceRoleKey", "Service role key", true),
        ],
        shares: "the tables of your project's database you choose",
        sync_models: &[],
        steps: &[],
    },
    Provider {
        id: "clerk",
        name: "Clerk",
        category: "Analytics",
        setup_mode: SetupMode::DirectApiKey,
        credential_type: "secret_key",
        fields: &[field("secretKey", "Secret key", true)],
        shares: "users and organizations of your application",
        sync_models: &[],
        steps: &[],
    },
    Provider {
        id: "pylon",
        name: "Pylon",
        category: "Support",
        setup_mode: SetupMode::DirectApiKey,
        credential_type: "api_token",
        fields: &[field("apiToken", "API token", true)],
        shares: "support issues and their accounts",
        sync_models: &[],
        steps: &[],
    },
];

/// A provider by its exact ID (API requests).
pub fn by_id(id: &str) -> Option<&'static Provider> {
    PROVIDERS.iter().find(|p| p.id == id)
}

/// A provider by its ID or CLI alias (`gmail`).
pub fn by_id_or_alias(name: &str) -> Option<&'static Provider> {
    if name == GMAIL_ALIAS {
        by_id(GOOGLE_MAIL)
    } else {
        by_id(name)
    }
}

/// Every provider ID, for error messages.
pub fn ids() -> String {
    PROVIDERS
        .iter()
        .map(|p| p.id)
        .collect::<Vec<_>>()
        .join(", ")
}
