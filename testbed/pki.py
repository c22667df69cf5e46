"""Test certificates made by openssl: a CA, and leaf certificates it signs.

    ca = TestCA(directory, "ca")                          # directory/ca.crt, ca.key
    cert, key = ca.issue("server", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    cert, key = ca.issue("admin", subject="/O=system:masters/CN=cert-admin")

Leaf keys are RSA 2048; certificates are valid for two days.
"""

import os
import subprocess


def openssl(*args, cwd=None):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class TestCA:
    __test__ = False  # not a pytest test class

    def __init__(self, directory, name="ca", cn=None, key_args=("-newkey", "rsa:2048")):
        self.directory = str(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.name = name
        self.crt, self.key = self._path(f"{name}.crt"), self._path(f"{name}.key")
        openssl(
            "req",
            "-x509",
            *key_args,
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={cn or 'test-' + name}",
            "-keyout",
            self.key,
            "-out",
            self.crt,
        )

    def _path(self, filename):
        return os.path.join(self.directory, filename)

    def issue(self, name, extensions="", subject=None):
        """A certificate for `name` signed by this CA: (cert path, key path).

        `extensions` are openssl x509v3 lines (subjectAltName=..., extendedKeyUsage=...).
        """
        crt, key, csr = (self._path(f"{name}.{ext}") for ext in ("crt", "key", "csr"))
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            subject or f"/CN={name}",
            "-keyout",
            key,
            "-out",
            csr,
        )
        signing = [
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            self.crt,
            "-CAkey",
            self.key,
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            crt,
        ]
        if extensions:
            ext = self._path(f"{name}.ext")
            with open(ext, "w") as f:
                f.write(extensions.strip() + "\n")
            signing += ["-extfile", ext]
        openssl(*signing)
        return crt, key
