"""An agent runtime that triages the SMS a phone forwards: it follows the event stream, and for each
ingest.message drafts a reply through the phone's sms_send tool in the message's triage session.

A triage session is untrusted (its content comes from a stranger), so tapgate raises the send to an
approval: the person sees the draft on their phone and decides. The runtime prints what happened.

    python examples/triage_runtime.py --url http://127.0.0.1:8080 --token "$TAPGATE_AGENT_TOKEN"

A gateway with a certificate from its own CA (tapgate tls init) needs --ca-file tls/ca.pem (or
TAPGATE_CA_FILE).

--once stops after the first message; --after N starts after event N (the last one handled before).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from tapgate.client import Client, GatewayNotTrusted

DRAFT = "Thanks for your message. I have seen it and will get back to you soon."


def sms_tool(device_id: str) -> str:
    return f"device__{device_id.replace('-', '_')}__sms_send"


async def run(url: str, token: str, after: int | None, once: bool, ca_file: str | None) -> int:
    async with Client(url, token, verify=ca_file) as tapgate:
        async for event in tapgate.events(after=after):
            if event.type != "ingest.message":
                continue
            data = event.data
            # The body is a stranger's words: shown to the person, never obeyed.
            print(f"event {event.id}: an SMS from {data['sender']} on {data['device_id']} (untrusted)")
            call = await tapgate.invoke(
                sms_tool(str(data["device_id"])),
                {"to": data["sender"], "body": DRAFT},
                session_id=str(data["session_id"]),
                wait=2,
            )
            if call.status == "awaiting_approval":
                print(f"reply drafted: awaiting_approval on the phone, code {call.binding_code} ({call.id})")
            elif call.status in ("refused", "unavailable"):
                print(f"reply not sent: {call.status}: {call.reason}")
            else:
                print(f"reply: {call.status}: {call.result.text if call.result else ''}")
            if once:
                print(f"resume with --after {event.id}")
                return 0
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=os.environ.get("TAPGATE_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--token", default=os.environ.get("TAPGATE_AGENT_TOKEN"), help="An agent token.")
    parser.add_argument("--after", type=int, default=None, help="Start after this event id.")
    parser.add_argument("--once", action="store_true", help="Stop after the first message.")
    parser.add_argument("--ca-file", help="A CA to trust for the gateway's https (or TAPGATE_CA_FILE).")
    args = parser.parse_args()
    if not args.token:
        parser.error("an agent token is needed: --token or TAPGATE_AGENT_TOKEN")
    try:
        return asyncio.run(run(args.url, args.token, args.after, args.once, args.ca_file))
    except GatewayNotTrusted as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
