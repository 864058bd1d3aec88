"""One set of rules for every limit a ``PATCHSET_*`` variable sets (``patchset.envlimits``): the
network's, an archive's and the lock wait read the same value the same way, and refuse the same
values with a message naming the variable."""

from __future__ import annotations

import pytest

from patchset import locking
from patchset.errors import EnvironmentFailure
from patchset.upstream import net
from patchset.upstream.limits import MAX_BYTES_ENV, MAX_MEMBERS_ENV, ArchiveLimits


@pytest.mark.parametrize(("value", "size"), [("65536", 65536), ("64M", 64 << 20), (" 2GiB ", 2 << 30), ("3k", 3072)])
def test_a_size_reads_the_same_for_the_network_and_an_archive(monkeypatch, value, size):
    monkeypatch.setenv(net.ENV_MAX_JSON, value)
    monkeypatch.setenv(MAX_BYTES_ENV, value)
    assert net.limits().max_json == size
    assert ArchiveLimits.from_env().max_bytes == size


@pytest.mark.parametrize("value", ["1e6", "0", "-5", "lots", "1.5G"])
def test_a_bad_size_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(net.ENV_MAX_BODY, value)
    monkeypatch.setenv(MAX_MEMBERS_ENV, value)
    with pytest.raises(EnvironmentFailure, match=f"{net.ENV_MAX_BODY}={value!r} is not a positive number of bytes"):
        net.limits()
    with pytest.raises(EnvironmentFailure, match=f"{MAX_MEMBERS_ENV}={value!r} is not a positive number of members"):
        ArchiveLimits.from_env()


def test_blank_is_the_default_everywhere(monkeypatch):
    for name in (net.ENV_REQUEST, net.ENV_MAX_JSON, MAX_BYTES_ENV, "PATCHSET_LOCK_TIMEOUT"):
        monkeypatch.setenv(name, "  ")
    lim, default = net.limits(), net.limits({})
    assert (lim.request, lim.max_json) == (default.request, default.max_json)
    assert ArchiveLimits.from_env().max_bytes == ArchiveLimits().max_bytes
    assert locking.timeout_seconds() == locking.DEFAULT_TIMEOUT


@pytest.mark.parametrize(("value", "seconds"), [("0.5", 0.5), ("1e3", 1000.0), ("inf", float("inf"))])
def test_seconds_read_the_same_for_the_network_and_the_lock(monkeypatch, value, seconds):
    monkeypatch.setenv(net.ENV_COMMAND, value)
    monkeypatch.setenv("PATCHSET_LOCK_TIMEOUT", value)
    assert net.limits().command == seconds
    assert locking.timeout_seconds() == seconds


def test_zero_means_do_not_wait_for_the_lock_only(monkeypatch):
    monkeypatch.setenv("PATCHSET_LOCK_TIMEOUT", "0")
    assert locking.timeout_seconds() == 0.0
    with pytest.raises(EnvironmentFailure, match="PATCHSET_NET_REQUEST_DEADLINE='0' is not a positive number"):
        net.limits({net.ENV_REQUEST: "0"})


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_bad_lock_wait_is_refused_not_clamped(monkeypatch, value):
    monkeypatch.setenv("PATCHSET_LOCK_TIMEOUT", value)
    with pytest.raises(EnvironmentFailure, match=f"PATCHSET_LOCK_TIMEOUT={value!r} is not a number of seconds"):
        locking.timeout_seconds()
