"""The terminal phone: a device client that talks to a gateway over HTTP and WebSocket, as a phone app does.

It keeps its private key in a file, enrols or pairs, answers invocations with registered handlers (or
simulates them), and signs the person's approvals. It imports only the pure domain (the signed text, the
key formats, the vectors check), never the gateway's services, adapters or API.
"""
