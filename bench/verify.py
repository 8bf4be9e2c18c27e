"""Signature verification in the bench's own process: the raw rate and tapgate's, per CPU second."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.rows import BY_NAME, Row


@dataclass
class _Rate:
    """Calls of one step and the CPU this thread spent on them: calls per CPU second does not depend on
    what else the machine runs, where calls per wall second would."""

    calls: int = 0
    cpu: float = 0.0
    wall: float = 0.0

    def run(self, step: Callable[[], object], seconds: float) -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        deadline = wall + seconds
        while True:
            for _ in range(20):
                step()
            self.calls += 20
            if time.perf_counter() > deadline or self.calls >= 1_000_000:
                break
        self.cpu += time.thread_time() - cpu
        self.wall += time.perf_counter() - wall

    @property
    def per_cpu_second(self) -> float:
        return self.calls / self.cpu if self.cpu else 0.0

    @property
    def per_wall_second(self) -> float:
        return self.calls / self.wall if self.wall else 0.0


def verification(seconds: float) -> tuple[Row, Row]:
    """In this process, in interleaved turns: ``cryptography``'s raw P-256 verify, and a decision verified
    the way tapgate verifies one (the signed text built from the approval, then ``verify_decision`` with
    the device's stored key as text), over the same key and signature; each per CPU second."""
    import base64

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    from tapgate.domain.approvals import sign_decision, signed_text, verify_decision
    from tapgate.domain.keys import KeyAlgorithm, canonical_public_key, load_public_key

    key = ec.generate_private_key(ec.SECP256R1())
    fields = (
        "tapgate-approval-v1",
        "apr_" + "0" * 32,
        "approved",
        "unlock_door",
        "door",
        "a" * 64,
        "b" * 32,
        2_000_000_000,
    )
    text = signed_text(*fields)
    signature = sign_decision(key, text)
    payload, der = text.encode(), base64.b64decode(signature)
    public, algorithm = key.public_key(), ec.ECDSA(hashes.SHA256())
    spki = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    stored = canonical_public_key(load_public_key(KeyAlgorithm.P256, base64.b64encode(spki).decode()))
    edkey = ed25519.Ed25519PrivateKey.generate()
    edsig, edpublic = edkey.sign(payload), edkey.public_key()
    raw, decided, ed = _Rate(), _Rate(), _Rate()
    rounds = 10  # interleaved, so that the three share whatever else the machine is doing
    for _ in range(rounds):
        raw.run(lambda: public.verify(der, payload, algorithm), seconds / rounds)
        decided.run(
            lambda: verify_decision("p256", stored, signed_text(*fields), signature), seconds / rounds
        )
        ed.run(lambda: edpublic.verify(edsig, payload), seconds / rounds)
    raw_row = Row(
        BY_NAME["verify-raw"],
        value=round(raw.per_cpu_second, 1),
        detail={
            "per": "CPU second of the measuring thread",
            "per_wall_second": round(raw.per_wall_second, 1),
            "ed25519_raw_per_cpu_second": round(ed.per_cpu_second, 1),
            "seconds": seconds,
        },
    )
    decision_row = Row(
        BY_NAME["approvals"],
        value=round(decided.per_cpu_second, 1),
        detail={
            "per": "CPU second of the measuring thread",
            "per_wall_second": round(decided.per_wall_second, 1),
            "path": "signed_text + verify_decision(alg, stored key text, text, base64 DER)",
            "seconds": seconds,
        },
    )
    return raw_row, decision_row
