// A client program written against the TypeScript types generated from openapi.yaml
// (`openapi-typescript openapi.yaml -o schema.d.ts`) and the openapi-fetch client.
// .ci/sdk-check runs `tsc --noEmit --strict` on it: it only has to type-check.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema";

type Schemas = components["schemas"];

/** The success envelope, or an exception carrying the error body. */
function ok<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.data === undefined) {
    throw new Error(`HTTP ${result.response.status}: ${JSON.stringify(result.error)}`);
  }
  return result.data;
}

export async function setUp(baseUrl: string, apiKey: string): Promise<void> {
  const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } });

  const pricingVisit: Schemas["SignalCreate"] = {
    kind: "EVENT_MATCH",
    name: "Pricing page visit",
    description: "Someone looked at pricing.",
    definition: {
      grain: "user",
      subjectResolver: "email",
      eventNames: ["pageview"],
      propertyConditions: [{ property: "path", operator: "contains", value: "/pricing" }],
      conditionMode: "ALL",
    },
  };
  const signal = ok(await client.POST("/api/signals", { body: pricingVisit })).result.data.signal;

  const crm: Schemas["WebhookEndpointDestinationCreate"] = {
    type: "WEBHOOK_ENDPOINT",
    name: "CRM webhook",
    url: "https://crm.example.com/hooks/custintel",
  };
  const webhook = ok(await client.POST("/api/destinations", { body: crm })).result.data;
  console.log("webhook signing secret:", webhook.signingSecret);

  const sales: Schemas["SlackChannelDestinationCreate"] = {
    type: "SLACK_CHANNEL",
    name: "#sales",
    webhookUrl: "https://hooks.slack.com/services/T000/B000/XXXX",
    isDefault: true,
  };
  const slack = ok(await client.POST("/api/destinations", { body: sales })).result.data.destination;

  const hotLead: Schemas["SignalOccurrenceAutomationCreate"] = {
    name: "Hot lead",
    triggerType: "SIGNAL_OCCURRENCE",
    triggerJson: { window: "7d", atLeast: 1, dedupe: "day" },
    audienceFilterJson: { billingStatus: ["TRIALING"], minMrrCents: 0 },
    matchMode: "AT_LEAST",
    signalIds: [signal.id],
    destinationIds: [webhook.destination.id, slack.id],
  };
  const onSignal = ok(await client.POST("/api/automations", { body: hotLead })).result.data.automation;

  const anySignal: Schemas["AnyOrAllSignalOccurrenceAutomationCreate"] = {
    name: "Any signal",
    triggerType: "SIGNAL_OCCURRENCE",
    triggerJson: { dedupe: "hour" },
    matchMode: "ANY",
    signalIds: [signal.id],
  };
  const onAny = ok(await client.POST("/api/automations", { body: anySignal })).result.data.automation;

  const digest: Schemas["ScheduleAutomationCreate"] = {
    name: "Weekly digest",
    triggerType: "SCHEDULE",
    triggerJson: { cron: "0 9 * * 1", timezone: "Europe/Berlin" },
    matchMode: "ALL",
    agentId: null,
    destinationIds: [slack.id],
  };
  const weekly = ok(await client.POST("/api/automations", { body: digest })).result.data.automation;
  console.log("created", onSignal.key, onAny.key, weekly.key);

  const byEvent: Schemas["AutomationTestRequest"] = { eventId: "evt_123" };
  const bySubject: Schemas["AutomationTestRequest"] = { subject: { grain: "customer", key: "acme.com" } };
  const runs = [
    ok(await client.POST("/api/automations/{id}/test", { params: { path: { id: onSignal.id } }, body: byEvent })),
    ok(await client.POST("/api/automations/{id}/test", { params: { path: { id: weekly.id } }, body: bySubject })),
  ].map((envelope) => envelope.result.data.run);
  for (const run of runs) console.log(run.status, run.skipReason);
}
