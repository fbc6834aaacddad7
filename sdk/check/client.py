"""A client program written against the Python SDK generated from openapi.yaml.

.ci/sdk-check generates the SDK (`openapi-python-client generate --path openapi.yaml --meta none`,
package `custintel_client`) and runs `mypy --strict` on this file: it only has to type-check.
"""

import os
from typing import TypeVar

from custintel_client import AuthenticatedClient
from custintel_client.api.automations import create_automation, test_automation
from custintel_client.api.destinations import create_destination
from custintel_client.api.signals import create_signal
from custintel_client.models import (
    AudienceFilter,
    BillingStatus,
    AutomationTestByEvent,
    AutomationTestBySubject,
    ErrorBody,
    ErrorEnvelope,
    EventMatchDefinition,
    ConditionMode,
    Grain,
    Resolver,
    MatchMode,
    ComparisonCondition,
    ComparisonOperator,
    ScheduleAutomationCreate,
    ScheduleAutomationCreateTriggerType,
    CronSchedule,
    SignalCreate,
    SignalCreateKind,
    AnyOrAllMatchMode,
    AnyOrAllSignalOccurrenceAutomationCreate,
    AnyOrAllSignalOccurrenceAutomationCreateTriggerType,
    AtLeastMatchMode,
    AtLeastSignalOccurrenceAutomationCreate,
    AtLeastSignalOccurrenceAutomationCreateTriggerType,
    AtLeastSignalOccurrenceTrigger,
    SignalOccurrenceTrigger,
    Dedupe,
    SlackChannelDestinationCreate,
    SlackChannelDestinationCreateType,
    TestSubject,
    TestSubjectGrain,
    WebhookEndpointDestinationCreate,
    WebhookEndpointDestinationCreateType,
)

T = TypeVar("T")


def ok(response: T | ErrorBody | ErrorEnvelope | None) -> T:
    """The success envelope, or an exception carrying the error body."""
    if response is None or isinstance(response, (ErrorBody, ErrorEnvelope)):
        raise RuntimeError(f"request failed: {response!r}")
    return response


def main() -> None:
    client = AuthenticatedClient(
        base_url=os.environ.get("CUSTINTEL_BASE_URL", "http://127.0.0.1:8080"),
        token=os.environ["CUSTINTEL_API_KEY"],
    )

    signal = ok(
        create_signal.sync(
            client=client,
            body=SignalCreate(
                kind=SignalCreateKind.EVENT_MATCH,
                name="Pricing page visit",
                definition=EventMatchDefinition(
                    grain=Grain.USER,
                    subject_resolver=Resolver.EMAIL,
                    event_names=["pageview"],
                    property_conditions=[
                        ComparisonCondition(
                            property_="path",
                            operator=ComparisonOperator.CONTAINS,
                            value="/pricing",
                        ),
                    ],
                    condition_mode=ConditionMode.ALL,
                ),
                description="Someone looked at pricing.",
            ),
        )
    ).result.data.signal

    webhook = ok(
        create_destination.sync(
            client=client,
            body=WebhookEndpointDestinationCreate(
                type_=WebhookEndpointDestinationCreateType.WEBHOOK_ENDPOINT,
                name="CRM webhook",
                url="https://crm.example.com/hooks/custintel",
            ),
        )
    ).result.data
    print("webhook signing secret:", webhook.signing_secret)

    slack = ok(
        create_destination.sync(
            client=client,
            body=SlackChannelDestinationCreate(
                type_=SlackChannelDestinationCreateType.SLACK_CHANNEL,
                name="#sales",
                webhook_url="https://hooks.slack.com/services/T000/B000/XXXX",
                is_default=True,
            ),
        )
    ).result.data.destination

    on_signal = ok(
        create_automation.sync(
            client=client,
            body=AtLeastSignalOccurrenceAutomationCreate(
                name="Hot lead",
                trigger_type=AtLeastSignalOccurrenceAutomationCreateTriggerType.SIGNAL_OCCURRENCE,
                trigger_json=AtLeastSignalOccurrenceTrigger(
                    at_least=1, window="7d", dedupe=Dedupe.DAY
                ),
                audience_filter_json=AudienceFilter(billing_status=[BillingStatus.TRIALING], min_mrr_cents=0),
                match_mode=AtLeastMatchMode.AT_LEAST,
                signal_ids=[str(signal.id)],
                destination_ids=[str(webhook.destination.id), str(slack.id)],
            ),
        )
    ).result.data.automation

    on_any = ok(
        create_automation.sync(
            client=client,
            body=AnyOrAllSignalOccurrenceAutomationCreate(
                name="Any signal",
                trigger_type=AnyOrAllSignalOccurrenceAutomationCreateTriggerType.SIGNAL_OCCURRENCE,
                trigger_json=SignalOccurrenceTrigger(dedupe=Dedupe.HOUR),
                match_mode=AnyOrAllMatchMode.ANY,
                signal_ids=[str(signal.id)],
            ),
        )
    ).result.data.automation

    weekly = ok(
        create_automation.sync(
            client=client,
            body=ScheduleAutomationCreate(
                name="Weekly digest",
                trigger_type=ScheduleAutomationCreateTriggerType.SCHEDULE,
                trigger_json=CronSchedule(cron="0 9 * * 1-5", timezone="Europe/Berlin"),
                match_mode=MatchMode.ALL,
                agent_id=None,
                destination_ids=[str(slack.id)],
            ),
        )
    ).result.data.automation
    print("created", on_signal.key, on_any.key, weekly.key)

    by_event = ok(
        test_automation.sync(
            str(on_signal.id), client=client, body=AutomationTestByEvent(event_id="evt_123")
        )
    ).result.data
    by_subject = ok(
        test_automation.sync(
            str(weekly.id),
            client=client,
            body=AutomationTestBySubject(
                subject=TestSubject(grain=TestSubjectGrain.CUSTOMER, key="acme.com")
            ),
        )
    ).result.data
    for run in (by_event.run, by_subject.run):
        print(run.status, run.skip_reason)


if __name__ == "__main__":
    main()
