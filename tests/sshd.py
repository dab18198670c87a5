"""A real SSH server for tests (asyncssh), standing in for another node: `ssh` and florwb
talk the SSH protocol to it, and every command it is asked to run runs in a real `bash -c`
with its stdin, stdout and stderr carried over the channel, and its exit status returned.

`Node.start` runs it as another host (`hostname` answers the node's name there: a UTS
namespace of its own, `as_host`), on 127.0.0.1 with a host key and an authorized client key
made for the test, and writes the ssh config a user would write for it (Host alias, Port,
IdentityFile, a known_hosts file holding its host key, strict checking).

Run as a script (`python sshd.py HOST_KEY AUTHORIZED_KEYS`) it serves until killed and
prints its port once it listens.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


def as_host(name: str, argv: list[str]) -> list[str]:
    """`argv` run as a process of a host named `name`: its own UTS namespace (as root, or
    in a user namespace of its own otherwise), the rest of this machine shared."""
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", "--uts", *user, "sh", "-c", f'hostname {name} && exec "$@"', "sh", *argv]


@dataclass
class Node:
    name: str
    port: int
    config: Path  # ssh -F: Host <name> and the failing aliases below
    proc: subprocess.Popen

    @property
    def env(self) -> dict[str, str]:
        """What a user sets for florwb to reach the node with that config (FLORWB_SSH)."""
        return {"FLORWB_SSH": f"ssh -F {self.config}"}

    @classmethod
    def start(cls, folder: Path, name: str, closed_port: int) -> Node:
        import asyncssh

        folder.mkdir(parents=True, exist_ok=True)
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        host_key.write_private_key(folder / "host_key")
        client, stranger = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
        for key, file in ((client, "id_node"), (stranger, "id_stranger")):
            key.write_private_key(folder / file)
            (folder / file).chmod(0o600)
        client.write_public_key(folder / "authorized_keys")
        (folder / "known_hosts").write_bytes(
            name.encode() + b" " + host_key.export_public_key("openssh")
        )
        server = Path(__file__).resolve()
        proc = subprocess.Popen(
            as_host(name, [sys.executable, str(server), "host_key", "authorized_keys"]),
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()  # its port, once it listens
        if not line.strip().isdigit():
            proc.kill()
            raise AssertionError(f"sshd did not start: {line}{proc.communicate()[1]}")
        port = int(line)
        common = (
            f"  HostName 127.0.0.1\n  User {os.environ.get('USER', 'root')}\n"
            f"  HostKeyAlias {name}\n  UserKnownHostsFile {folder / 'known_hosts'}\n"
            "  StrictHostKeyChecking yes\n  BatchMode yes\n  IdentitiesOnly yes\n"
            "  ConnectTimeout 20\n"
        )
        config = folder / "ssh_config"
        config.write_text(
            f"Host {name}\n  Port {port}\n  IdentityFile {folder / 'id_node'}\n{common}"
            f"Host {name}-closed\n  Port {closed_port}\n  IdentityFile {folder / 'id_node'}\n"
            f"{common}"
            f"Host {name}-stranger\n  Port {port}\n  IdentityFile {folder / 'id_stranger'}\n"
            f"{common}"
        )
        return cls(name, port, config, proc)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate()


async def _run(process) -> None:
    """The command in `bash -c`, its streams copied both ways until it exits and its output
    is all sent; then its exit status (a signal's death as 128 + the signal, like sshd)."""
    local = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        process.command or "exec bash -l",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )

    async def out(source, sink) -> None:
        while data := await source.read(1 << 16):
            sink.write(data)
            await sink.drain()

    async def into(source, sink) -> None:
        try:
            while data := await source.read(1 << 16):
                sink.write(data)
                await sink.drain()
        except (BrokenPipeError, ConnectionResetError):  # the command stopped reading
            pass
        finally:
            sink.close()

    feeding = asyncio.ensure_future(into(process.stdin, local.stdin))
    await asyncio.gather(out(local.stdout, process.stdout), out(local.stderr, process.stderr))
    status = await local.wait()
    feeding.cancel()
    process.exit(status if status >= 0 else 128 - status)


async def _serve(host_key: str, authorized: str) -> None:
    import asyncssh

    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=authorized,
        process_factory=_run,
        encoding=None,  # bytes: tar streams pass untouched
        allow_scp=False,
    )
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], sys.argv[2]))
