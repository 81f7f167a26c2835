"""Ed25519 signatures over a bundle's MANIFEST.json, and the key pairs that make them.

Why over MANIFEST.json alone: it holds the bundle's name, version and build number and the sha256
of every other file, so one signature vouches for the whole bundle, and a board checks it with the
stock ``openssl pkeyutl -verify -rawin`` (OpenSSL 1.1.1+) without edgefuse. The signature is the
raw 64 bytes in ``MANIFEST.sig`` beside MANIFEST.json; keys are PEM (PKCS#8 private, SPKI public),
the formats both ``cryptography`` and ``openssl`` read. Ed25519 signing is deterministic, so a
signed rebuild stays byte-identical.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgefuse._files import write_text
from edgefuse.bundle.archive import MANIFEST, SIGNATURE
from edgefuse.errors import InputError, Ref

INSTALLER_SIGNATURE_SUFFIX = ".sig"  # OUT_DIR/install.sh.sig


def new_key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """Write ``NAME.key.pem`` (mode 0600) and ``NAME.pub.pem`` into ``folder``; refuses to
    overwrite either."""
    private_path, public_path = folder / f"{name}.key.pem", folder / f"{name}.pub.pem"
    for path in (private_path, public_path):
        if path.exists():
            raise InputError(f"'{path}' exists; a signing key is never overwritten",
                             hint="choose another NAME or folder", reference=Ref.BAD_OUTPUT_PATH)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(private)
    write_text(public_path, key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode())
    return private_path, public_path


def _read_pem(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the key '{path}': {exc.strerror}",
                         reference=Ref.BAD_SIGNING_KEY) from exc


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(_read_pem(path), password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"'{path}' is not an unencrypted PEM private key ({exc})",
                         hint="make one with `edgefuse keys new NAME`",
                         reference=Ref.BAD_SIGNING_KEY) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"'{path}' is not an Ed25519 key", hint="make one with `edgefuse keys "
                         "new NAME`", reference=Ref.BAD_SIGNING_KEY)
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(_read_pem(path))
    except ValueError as exc:
        raise InputError(f"'{path}' is not a PEM public key ({exc})",
                         hint="give the NAME.pub.pem that `edgefuse keys new` wrote",
                         reference=Ref.BAD_SIGNING_KEY) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"'{path}' is not an Ed25519 public key",
                         reference=Ref.BAD_SIGNING_KEY)
    return key


def key_fingerprint(path: Path) -> str:
    """The sha256 of the public key's DER form (``openssl pkey -pubin -outform DER | sha256sum``):
    the file name a trust store gives the key, so that two keys never share a name."""
    der = load_public_key(path).public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def sign_bundle(bundle: Path, key_path: Path) -> None:
    """Write ``MANIFEST.sig``: the signature of ``bundle/MANIFEST.json`` by the key."""
    key = load_private_key(key_path)
    (bundle / SIGNATURE).write_bytes(key.sign((bundle / MANIFEST).read_bytes()))
    (bundle / SIGNATURE).chmod(0o644)


def sign_installer(installer: Path, key_path: Path) -> Path:
    """Write ``INSTALLER.sig`` beside the installer a first install runs: the raw Ed25519
    signature of its bytes, which ``edgefuse-verify-installer`` (or ``openssl pkeyutl -verify
    -rawin``) checks on the board before it runs (MANIFEST.sig cannot vouch for the program that
    checks it)."""
    signature = installer.with_name(installer.name + INSTALLER_SIGNATURE_SUFFIX)
    signature.write_bytes(load_private_key(key_path).sign(installer.read_bytes()))
    signature.chmod(0o644)
    return signature


def check_signature(manifest: bytes, signature: bytes | None, keys: Sequence[Path],
                    where: Path) -> Path:
    """The key of ``keys`` that signed ``manifest``; refuses an unsigned or forged bundle."""
    if signature is None:
        raise InputError(f"'{where}' is not signed ({SIGNATURE} is missing)",
                         hint="sign it with `edgefuse build --sign KEY`; nothing was installed",
                         reference=Ref.BAD_SIGNATURE)
    for path in keys:
        try:
            load_public_key(path).verify(signature, manifest)
        except InvalidSignature:
            continue
        return path
    raise InputError(f"the signature of '{where}' matches no trusted key",
                     context="trusted: " + ", ".join(str(path) for path in keys),
                     hint="forged or signed with another key: nothing was installed",
                     reference=Ref.BAD_SIGNATURE)
