"""TLS material for a loopback control plane, made with the openssl CLI.

A CA, an apiserver serving cert for 127.0.0.1, an admin client cert in system:masters and an
RSA key pair for signing service-account tokens; plus a kubeconfig with the certs embedded
(kopf and others mishandle relative cert paths).
"""

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,\
DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:{service_ip}
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
"""


@dataclass(frozen=True)
class Pki:
    """Paths of the generated files inside the run folder."""

    dir: Path

    def __getattr__(self, name: str) -> Path:
        # ca_crt -> ca.crt, admin_key -> admin.key, sa_pub -> sa.pub ...
        stem, _, ext = name.rpartition("_")
        return self.dir / f"{stem}.{ext}"


def _ossl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path, service_ip: str) -> Pki:
    """Create all certs and keys in d (0700); cheap enough to redo on each fresh start."""
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    (d / "openssl.cnf").write_text(_CNF.format(service_ip=service_ip))
    days = "3650"
    for key in ("ca", "apiserver", "admin", "sa"):
        _ossl("genrsa", "-out", f"{key}.key", "2048", cwd=d)
    _ossl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=kubeprof-e2e-ca",
        "-days",
        days,
        "-config",
        "openssl.cnf",
        "-extensions",
        "v3_ca",
        "-out",
        "ca.crt",
        cwd=d,
    )
    for name, subj, ext in (
        ("apiserver", "/CN=kube-apiserver", "server"),
        ("admin", "/O=system:masters/CN=kubeprof-admin", "client"),
    ):
        _ossl(
            "req",
            "-new",
            "-key",
            f"{name}.key",
            "-subj",
            subj,
            "-config",
            "openssl.cnf",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        _ossl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            days,
            "-extfile",
            "openssl.cnf",
            "-extensions",
            ext,
            "-out",
            f"{name}.crt",
            cwd=d,
        )
    _ossl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    for f in d.iterdir():
        f.chmod(0o600)
    return Pki(d)


def _b64(p: Path) -> str:
    return base64.b64encode(p.read_bytes()).decode()


def write_kubeconfig(path: Path, pki: Pki, server: str, name: str = "kubeprof-e2e") -> Path:
    """A single-context kubeconfig with embedded CA and admin client cert."""
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {server}
    certificate-authority-data: {_b64(pki.ca_crt)}
users:
- name: {name}-admin
  user:
    client-certificate-data: {_b64(pki.admin_crt)}
    client-key-data: {_b64(pki.admin_key)}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}-admin
current-context: {name}
preferences: {{}}
"""
    )
    path.chmod(0o600)
    return path
