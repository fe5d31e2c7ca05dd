"""Certificates made at test time (never committed): a CA, server and client certificates, written
as PEM files and PKCS12 stores the way Kafka's ssl.* settings read them."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "test-pass"


@dataclass
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def key_pem(self, password: str | None = None) -> str:
        enc: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        )
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc).decode()


def _name(cn: str, ou: str | None = None, o: str | None = "Odradek Tests") -> x509.Name:
    attrs = []
    if o:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o))
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def make_ca(cn: str = "Odradek Test CA") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name(cn)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(key, cert)


def issue(
    ca: Issued, cn: str, *, ou: str | None = None, server: bool = False, expired: bool = False,
    hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
) -> Issued:
    """A certificate signed by ``ca``: for a server (SANs ``hosts``) or a client (subject CN/OU)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)) if expired else (
        now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, ou)).issuer_name(ca.cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if server:
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))


def write_pem(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def write_pkcs12(path: Path, issued: Issued, ca: Issued, password: str = PASSWORD) -> Path:
    """A PKCS12 key store: the key, its certificate and the CA's (the chain)."""
    data = pkcs12.serialize_key_and_certificates(
        b"odradek", issued.key, issued.cert, [ca.cert], serialization.BestAvailableEncryption(password.encode())
    )
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def write_pkcs12_truststore(path: Path, ca: Issued, password: str = PASSWORD) -> Path:
    """A PKCS12 trust store holding the CA certificate alone."""
    data = pkcs12.serialize_key_and_certificates(
        None, None, None, [ca.cert], serialization.BestAvailableEncryption(password.encode())
    )
    path.write_bytes(data)
    return path


@dataclass
class TlsFiles:
    """Everything a TLS test needs, under one directory."""

    dir: Path
    ca: Issued
    server: Issued
    ca_pem: Path
    server_p12: Path
    truststore_p12: Path

    def client(self, cn: str, *, ou: str | None = None, expired: bool = False, ca: Issued | None = None) -> tuple[Path, Path, Path]:
        """A client certificate: (cert PEM, key PEM, PKCS12 store) files."""
        issued = issue(ca or self.ca, cn, ou=ou, expired=expired)
        tag = f"{cn}{'-expired' if expired else ''}{'-other' if ca is not None else ''}"
        cert = write_pem(self.dir / f"{tag}.crt", issued.cert_pem)
        key = write_pem(self.dir / f"{tag}.key", issued.key_pem())
        p12 = write_pkcs12(self.dir / f"{tag}.p12", issued, ca or self.ca)
        return cert, key, p12

    def server_props(self, prefix: str = "", *, client_auth: str = "none", pem: bool = False) -> dict[str, str]:
        """ssl.* settings (with ``prefix``, e.g. ``listener.name.ssl.``) of a listener."""
        if pem:
            props = {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": self.server.cert_pem + self.ca.cert.public_bytes(
                    serialization.Encoding.PEM).decode(),
                "ssl.keystore.key": self.server.key_pem(PASSWORD),
                "ssl.key.password": PASSWORD,
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.ca_pem),
            }
        else:
            props = {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(self.server_p12),
                "ssl.keystore.password": PASSWORD,
                "ssl.key.password": PASSWORD,
                "ssl.truststore.type": "PKCS12",
                "ssl.truststore.location": str(self.truststore_p12),
                "ssl.truststore.password": PASSWORD,
            }
        props["ssl.client.auth"] = client_auth
        return {prefix + k: v for k, v in props.items()}


def make_tls_files(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca()
    server = issue(ca, "broker", ou="Brokers", server=True)
    return TlsFiles(
        directory, ca, server,
        ca_pem=write_pem(directory / "ca.pem", ca.cert_pem),
        server_p12=write_pkcs12(directory / "server.p12", server, ca),
        truststore_p12=write_pkcs12_truststore(directory / "truststore.p12", ca),
    )
