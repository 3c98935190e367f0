"""Kubernetes URL, IP and CIDR CEL libraries (apiserver/pkg/cel/library url.go, ip.go, cidr.go) in Python.

Values are one-field messages holding the canonical text (values.py), so `==` is semantic.
Addresses follow Go's net/netip rules as Kubernetes uses them: no IPv4-mapped IPv6, no zones,
no leading zeros in IPv4 octets.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from urllib.parse import SplitResult, parse_qs, urlsplit
from typing import Any, Callable

from cel_expr_python import cel

from gpudra.cel import binding
from gpudra.cel import values as V
from gpudra.cel.budget import metered

T = cel.Type
URL = T(V.URL_TYPE)
IP = T(V.IP_TYPE)
CIDR = T(V.CIDR_TYPE)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _overload(overload_id: str, result: Any, params: list[Any], impl: Callable[..., Any] | None = None,
              member: bool = True) -> Any:
    return binding.overload(overload_id, result, params, None if impl is None else metered(impl), member)


# ----- IP -------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def parse_address(text: str) -> Address:
    if "%" in text:
        raise ValueError("IP address with zone value is not allowed")
    try:
        address = ipaddress.ip_address(text)
    except ValueError as error:
        raise ValueError(f"IP Address {text!r} parse error during conversion from string: {error}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return address


def _ip(text: str) -> Any:
    return V.IPMessage(s=str(parse_address(text)))


def _is_ip(text: str) -> bool:
    try:
        parse_address(text)
    except ValueError:
        return False
    return True


def _is_canonical(text: str) -> bool:
    return str(parse_address(text)) == text


def _address(message: Any) -> Address:
    return parse_address(message.s)


def _is_link_local_multicast(address: Address) -> bool:
    if address.version == 4:
        return address in ipaddress.ip_network("224.0.0.0/24")
    return address.packed[0] == 0xFF and address.packed[1] & 0x0F == 0x02


def _is_global_unicast(address: Address) -> bool:
    if address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (address.is_unspecified or address.is_loopback or address.is_multicast or address.is_link_local)


# ----- CIDR -----------------------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def parse_prefix(text: str) -> tuple[Address, int]:
    address_text, slash, length_text = text.partition("/")
    if not slash:
        raise ValueError(f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): no '/'")
    address = parse_address(address_text)
    bits = 32 if address.version == 4 else 128
    if not length_text.isdigit() or (len(length_text) > 1 and length_text[0] == "0") or int(length_text) > bits:
        raise ValueError(
            f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): bad bits after slash: {length_text!r}"
        )
    return address, int(length_text)


def _cidr(text: str) -> Any:
    address, length = parse_prefix(text)
    return V.CIDRMessage(s=f"{address}/{length}")


def _is_cidr(text: str) -> bool:
    try:
        parse_prefix(text)
    except ValueError:
        return False
    return True


def _network(message: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    address, length = parse_prefix(message.s)
    return ipaddress.ip_network(f"{address}/{length}", strict=False)


def _contains_ip(message: Any, other: Any) -> bool:
    address = parse_address(other) if isinstance(other, str) else _address(other)
    network = _network(message)
    return address.version == network.version and address in network


def _contains_cidr(message: Any, other: Any) -> bool:
    inner = _network(_cidr(other) if isinstance(other, str) else other)
    outer = _network(message)
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]  # versions equal


def _cidr_ip(message: Any) -> Any:
    address, _ = parse_prefix(message.s)
    return V.IPMessage(s=str(address))


def _masked(message: Any) -> Any:
    network = _network(message)
    return V.CIDRMessage(s=f"{network.network_address}/{network.prefixlen}")


# ----- URL ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def _split_url(text: str) -> SplitResult:
    try:
        parts = urlsplit(text)
    except ValueError as error:
        raise ValueError(f"URL parse error during conversion from string: {error}") from None
    # url.ParseRequestURI: an absolute URI or an absolute path; no fragment part
    if not (parts.scheme or text.startswith("/")) or any(char in text for char in " \t\n") or "#" in text:
        raise ValueError(f"URL parse error during conversion from string: parse {text!r}: invalid URI for request")
    return parts


def _url(text: str) -> Any:
    _split_url(text)
    return V.URLMessage(s=text)


def _is_url(text: str) -> bool:
    try:
        _split_url(text)
    except ValueError:
        return False
    return True


def _hostname(message: Any) -> str:
    netloc = _split_url(message.s).netloc.rpartition("@")[2]
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")] if "]" in netloc else netloc
    return netloc.partition(":")[0]


def _port(message: Any) -> str:
    netloc = _split_url(message.s).netloc.rpartition("@")[2]
    if netloc.startswith("["):
        rest = netloc[netloc.find("]") + 1 :] if "]" in netloc else ""
        return rest[1:] if rest.startswith(":") else ""
    return netloc.partition(":")[2]


def _query(message: Any) -> dict[str, list[str]]:
    return parse_qs(_split_url(message.s).query, keep_blank_values=True)


NET_STRING = "__gpudra_net_string"


def _net_string(message: Any) -> str:
    return str(message.s)


def declarations(runtime: bool = False) -> list[cel.FunctionDecl]:
    """`runtime`: string(ip)/string(cidr) are declared for the checker only; cel-cpp's runtime registry refuses a
    second message overload of `string`, so the evaluation text calls __gpudra_net_string (gpudra.cel.guards)."""
    bool_, int_, string = T.BOOL, T.INT, T.STRING
    if runtime:
        to_string = [cel.FunctionDecl(NET_STRING, [_overload("gpudra_net_string", string, [T.DYN], _net_string,
                                                             member=False)])]
    else:
        to_string = [cel.FunctionDecl("string", [_overload("ip_to_string", string, [IP], None, member=False),
                                                 _overload("cidr_to_string", string, [CIDR], None, member=False)])]
    return to_string + [
        cel.FunctionDecl(
            "ip",
            [
                _overload("string_to_ip", IP, [string], _ip, member=False),
                _overload("cidr_ip", IP, [CIDR], _cidr_ip),
            ],
        ),
        cel.FunctionDecl("isIP", [_overload("is_ip", bool_, [string], _is_ip, member=False)]),
        cel.FunctionDecl("ip.isCanonical", [_overload("ip_is_canonical", bool_, [string], _is_canonical, member=False)]),
        cel.FunctionDecl("family", [_overload("ip_family", int_, [IP], lambda m: _address(m).version)]),
        cel.FunctionDecl("isUnspecified", [_overload("ip_is_unspecified", bool_, [IP], lambda m: _address(m).is_unspecified)]),
        cel.FunctionDecl("isLoopback", [_overload("ip_is_loopback", bool_, [IP], lambda m: _address(m).is_loopback)]),
        cel.FunctionDecl(
            "isLinkLocalMulticast",
            [_overload("ip_is_link_local_multicast", bool_, [IP], lambda m: _is_link_local_multicast(_address(m)))],
        ),
        cel.FunctionDecl(
            "isLinkLocalUnicast", [_overload("ip_is_link_local_unicast", bool_, [IP], lambda m: _address(m).is_link_local)]
        ),
        cel.FunctionDecl(
            "isGlobalUnicast", [_overload("ip_is_global_unicast", bool_, [IP], lambda m: _is_global_unicast(_address(m)))]
        ),
        cel.FunctionDecl("cidr", [_overload("string_to_cidr", CIDR, [string], _cidr, member=False)]),
        cel.FunctionDecl("isCIDR", [_overload("is_cidr", bool_, [string], _is_cidr, member=False)]),
        cel.FunctionDecl(
            "containsIP",
            [
                _overload("cidr_contains_ip_string", bool_, [CIDR, string], _contains_ip),
                _overload("cidr_contains_ip_ip", bool_, [CIDR, IP], _contains_ip),
            ],
        ),
        cel.FunctionDecl(
            "containsCIDR",
            [
                _overload("cidr_contains_cidr_string", bool_, [CIDR, string], _contains_cidr),
                _overload("cidr_contains_cidr", bool_, [CIDR, CIDR], _contains_cidr),
            ],
        ),
        cel.FunctionDecl("masked", [_overload("cidr_masked", CIDR, [CIDR], _masked)]),
        cel.FunctionDecl("prefixLength", [_overload("cidr_prefix_length", int_, [CIDR], lambda m: parse_prefix(m.s)[1])]),
        cel.FunctionDecl("url", [_overload("string_to_url", URL, [string], _url, member=False)]),
        cel.FunctionDecl("isURL", [_overload("is_url_string", bool_, [string], _is_url, member=False)]),
        cel.FunctionDecl("getScheme", [_overload("url_get_scheme", string, [URL], lambda m: _split_url(m.s).scheme)]),
        cel.FunctionDecl(
            "getHost", [_overload("url_get_host", string, [URL], lambda m: _split_url(m.s).netloc.rpartition("@")[2])]
        ),
        cel.FunctionDecl("getHostname", [_overload("url_get_hostname", string, [URL], _hostname)]),
        cel.FunctionDecl("getPort", [_overload("url_get_port", string, [URL], _port)]),
        cel.FunctionDecl("getEscapedPath", [_overload("url_get_escaped_path", string, [URL], lambda m: _split_url(m.s).path)]),
        cel.FunctionDecl("getQuery", [_overload("url_get_query", T.Map(string, T.List(string)), [URL], _query)]),
    ]
