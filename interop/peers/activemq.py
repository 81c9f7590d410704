"""Apache ActiveMQ 5.17 (Debian ``activemq``) with an AMQP transport connector, as a peer.

It runs in the foreground as a child JVM (``activemq.jar start xbean:file:...``)
from a private configuration: a non-persistent broker without JMX, web
console or OpenWire, whose only connectors are ``amqp://127.0.0.1:PORT`` and
``amqp+ssl://127.0.0.1:PORT`` (a PKCS#12 keystore made from our throwaway
CA's server certificate), with ``simpleAuthenticationPlugin`` giving one
PLAIN user and allowing anonymous access.

Debian's package has no AMQP transport: ``activemq-amqp`` and the Proton-J
library it needs are not packaged (and no registry this project may use has
them), so the broker refuses the ``amqp`` connector ("Transport scheme NOT
recognized: [amqp]") and the column is skipped with that reason. Point
``AMQP10_ACTIVEMQ_LIB`` at a directory holding ``activemq-amqp-5.17.x.jar`` and
the ``proton-j`` jar it was built against (0.33.10 for 5.17.2) to run it: the
jars go on the broker's extension class path (``${activemq.base}/lib``). The
broker's log (a private log4j configuration, to its console) is ``activemq.log``
in its directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..certs import Certs
from .base import (
    HOST,
    Endpoint,
    Peer,
    PeerUnavailable,
    Process,
    apt_install,
    free_port,
    wait_for_port,
)

__all__ = ["ActiveMQ"]

HOME = Path("/usr/share/activemq")
JAR = HOME / "bin" / "activemq.jar"
START_TIMEOUT = 90.0
STOP_GRACE = 20.0
USER, PASSWORD = "interop", "interop-secret"
IDLE_TIMEOUT_MS = 2000
EXTRA_LIB_ENV = "AMQP10_ACTIVEMQ_LIB"

_CONFIG = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="amqp10-interop"
          useJmx="false" persistent="false" advisorySupport="false" dataDirectory="{data}">
    <managementContext><managementContext createConnector="false"/></managementContext>
    <plugins>
      <simpleAuthenticationPlugin anonymousAccessAllowed="true">
        <users>
          <authenticationUser username="{user}" password="{password}" groups="users,admins"/>
        </users>
      </simpleAuthenticationPlugin>
    </plugins>
    {ssl}
    <transportConnectors>
      <transportConnector name="amqp" uri="amqp://{host}:{port}?transport.transformer=jms&amp;transport.wireFormat.idleTimeout={idle}"/>
      {tls_connector}
    </transportConnectors>
  </broker>
</beans>
"""

# Debian's package has no log4j configuration on this class path: without one the log is empty
_LOG4J = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d %-5p [%t] %c - %m%n
"""

_SSL = """<sslContext>
      <sslContext keyStore="file:{p12}" keyStorePassword="{pw}" keyStoreType="PKCS12"/>
    </sslContext>"""


def _version() -> str:
    for jar in sorted((HOME / "lib").glob("activemq-broker*.jar")) + sorted(
        Path("/usr/share/java").glob("activemq-broker-*.jar")
    ):
        name = jar.stem
        if name.count("-") >= 2:
            return name.rsplit("-", 1)[1]
    return "5.17"


class ActiveMQ(Peer):
    id = "activemq"
    title = "ActiveMQ"

    def __init__(self) -> None:
        self.proc: Process | None = None

    def available(self) -> str | None:
        if not JAR.exists():
            return "activemq is not installed (run with --install, or apt-get install activemq)"
        if shutil.which("java") is None:
            return "java is not installed"
        return None

    def install(self) -> None:
        if not JAR.exists():
            apt_install("activemq")

    def start(self, workdir: Path, certs: Certs | None) -> Endpoint:
        d = workdir / "activemq"
        conf, data, lib = d / "conf", d / "data", d / "lib"
        for sub in (conf, data, lib):
            sub.mkdir(parents=True, exist_ok=True)
        extra = os.environ.get(EXTRA_LIB_ENV)
        if extra:
            for jar in Path(extra).glob("*.jar"):
                shutil.copy(jar, lib / jar.name)
        port, tls_port = free_port(), free_port()
        ssl = tls_connector = ""
        if certs is not None:
            ssl = _SSL.format(p12=certs.server_p12, pw=certs.p12_password)
            tls_connector = (
                f'<transportConnector name="amqps" uri="amqp+ssl://{HOST}:{tls_port}'
                f'?transport.transformer=jms&amp;transport.wireFormat.idleTimeout={IDLE_TIMEOUT_MS}"/>'
            )
        (conf / "log4j.properties").write_text(_LOG4J)
        config = conf / "activemq.xml"
        config.write_text(
            _CONFIG.format(
                data=data,
                user=USER,
                password=PASSWORD,
                ssl=ssl,
                host=HOST,
                port=port,
                idle=IDLE_TIMEOUT_MS,
                tls_connector=tls_connector,
            )
        )
        argv = [
            shutil.which("java") or "java",
            "-Xms64M",
            "-Xmx256M",
            "-Djava.awt.headless=true",
            "--add-opens=java.base/java.lang=ALL-UNNAMED",
            f"-Dactivemq.classpath={conf}",
            f"-Dactivemq.home={HOME}",
            f"-Dactivemq.base={d}",
            f"-Dactivemq.conf={conf}",
            f"-Dactivemq.data={data}",
            "-jar",
            str(JAR),
            "start",
            f"xbean:file:{config}",
        ]
        self.proc = proc = Process(argv, d / "activemq.log", cwd=d)
        if not wait_for_port(port, START_TIMEOUT, lambda: proc.alive and not _refused(proc)):
            refusal = _refused(proc)
            if refusal:
                raise PeerUnavailable(
                    f"ActiveMQ refused the amqp connector ({refusal}): Debian's activemq package ships no"
                    f" AMQP transport (activemq-amqp and proton-j are not packaged); set {EXTRA_LIB_ENV}"
                    " to a directory with those jars to run this column"
                )
            raise PeerUnavailable(
                f"ActiveMQ did not start within {START_TIMEOUT:g}s: {proc.last_lines(2)}"
            )
        if certs is not None and not wait_for_port(tls_port, 15, lambda: proc.alive):
            raise PeerUnavailable("ActiveMQ's amqp+ssl connector did not come up")
        version = _version()
        return Endpoint(
            name=f"ActiveMQ {version}",
            port=port,
            tls_port=tls_port if certs is not None else None,
            ca=certs.ca if certs is not None else None,
            plain=(USER, PASSWORD),
            idle_timeout=IDLE_TIMEOUT_MS / 1000,
            address=lambda name: f"queue://{name}",
            log=d / "activemq.log",
            version=f"ActiveMQ {version}",
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=STOP_GRACE)
            self.proc = None


def _refused(proc: Process) -> str | None:
    m = proc.all_matches(r"Transport scheme NOT recognized: \[amqp[^\]]*\]")
    return m[0].group(0) if m else None
