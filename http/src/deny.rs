//! Addresses a client never connects to (`--outbound-deny`, less the ranges `--outbound-allow`
//! opens; the same flags on `hub-node` and `hub-agent`), and the resolver that enforces the
//! list on resolved addresses.
//!
//! The default denies loopback, private, shared (CGNAT), link-local and "this network"
//! addresses, IPv4 and IPv6, and the cloud metadata addresses by name (so that opening the
//! range around one does not open it). An address is denied when the most specific range that
//! contains it, denied or allowed, is a denied one (an allowed range of the same length
//! wins): `--outbound-allow 127.0.0.0/8` opens loopback, `--outbound-allow 169.254.0.0/16`
//! opens link-local but not `169.254.169.254/32`. An IPv4-mapped IPv6 address
//! (`::ffff:a.b.c.d`) and a NAT64 address of the well-known prefix (`64:ff9b::a.b.c.d`) are
//! also judged as the IPv4 address they carry.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// One address range, `address/prefix` (a bare address is a single-address range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a range did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a CIDR range: {reason}")]
pub struct InvalidCidr {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Cidr {
    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `address` is inside the range. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`)
    /// are compared as the IPv4 address they carry.
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                mask_v4(u32::from(a), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                mask_v6(u128::from(a), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask_v4(bits: u32, prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => bits & (u32::MAX << (32 - u32::from(p))),
    }
}

fn mask_v6(bits: u128, prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p => bits & (u128::MAX << (128 - u32::from(p))),
    }
}

impl FromStr for Cidr {
    type Err = InvalidCidr;

    fn from_str(input: &str) -> Result<Self, InvalidCidr> {
        let invalid = |reason: String| InvalidCidr {
            input: input.to_string(),
            reason,
        };
        let (address, prefix) = match input.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (input, None),
        };
        let network: IpAddr = address
            .parse()
            .map_err(|_| invalid(format!("{address:?} is not an IP address")))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| invalid(format!("the prefix length must be 0-{max}")))?,
        };
        let masked = match network {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(mask_v4(u32::from(a), prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(mask_v6(u128::from(a), prefix))),
        };
        if masked != network {
            return Err(invalid(format!(
                "bits are set after the prefix; did you mean {masked}/{prefix}?"
            )));
        }
        Ok(Self { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Address ranges a client never connects to, and the ranges opened inside them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DenyList {
    ranges: Vec<Cidr>,
    allowed: Vec<Cidr>,
}

/// The well-known NAT64 prefix, `64:ff9b::/96` (RFC 6052): its addresses carry an IPv4
/// address in their last 32 bits, which a NAT64 gateway connects to.
const NAT64_PREFIX: u128 = 0x0064_ff9b_u128 << 96;

/// `address` and, for a NAT64 address, the IPv4 address it reaches.
fn forms(address: IpAddr) -> [Option<IpAddr>; 2] {
    let address = address.to_canonical();
    let nat64 = match address {
        IpAddr::V6(a) if u128::from(a) >> 32 == NAT64_PREFIX >> 32 => {
            // The low 32 bits: the cast keeps exactly them.
            Some(IpAddr::V4(Ipv4Addr::from(u128::from(a) as u32)))
        }
        _ => None,
    };
    [Some(address), nat64]
}

/// The most specific range of `ranges` that contains `address`.
fn most_specific(ranges: &[Cidr], address: IpAddr) -> Option<Cidr> {
    ranges
        .iter()
        .copied()
        .filter(|r| r.contains(address))
        .max_by_key(|r| r.prefix)
}

impl DenyList {
    /// The default of `hub-node` and `hub-agent`: "this network" (`0.0.0.0/8`, which reaches
    /// the host itself), private (`10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`), shared
    /// (`100.64.0.0/10`), loopback (`127.0.0.0/8`), link-local (`169.254.0.0/16`), their IPv6
    /// equivalents (`::/128`, `::1/128`, unique-local `fc00::/7`, link-local `fe80::/10`),
    /// and the cloud metadata addresses 169.254.169.254, Alibaba Cloud's 100.100.100.200 and
    /// AWS's fd00:ec2::254 by name.
    pub const DEFAULT: &'static str = "0.0.0.0/8,10.0.0.0/8,100.64.0.0/10,127.0.0.0/8,\
        169.254.0.0/16,172.16.0.0/12,192.168.0.0/16,::/128,::1/128,fc00::/7,fe80::/10,\
        169.254.169.254/32,100.100.100.200/32,fd00:ec2::254/128";

    /// What `hubctl dev up` and `hubctl demo` open: loopback, IPv4 and IPv6.
    pub const LOOPBACK: &'static str = "127.0.0.0/8,::1/128";

    /// Nothing denied.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses comma-separated ranges (spaces around them are ignored); an empty text denies
    /// nothing.
    pub fn parse(list: &str) -> Result<Self, InvalidCidr> {
        Ok(Self {
            ranges: parse_ranges(list)?,
            allowed: Vec::new(),
        })
    }

    /// The list with `ranges` opened (`--outbound-allow`), added to those already open.
    pub fn allowing(mut self, ranges: impl IntoIterator<Item = Cidr>) -> Self {
        for range in ranges {
            if !self.allowed.contains(&range) {
                self.allowed.push(range);
            }
        }
        self
    }

    /// The range that denies `address`, if any: the most specific denied range containing it,
    /// unless an allowed range at least as specific contains it too.
    pub fn denies(&self, address: IpAddr) -> Option<Cidr> {
        forms(address).into_iter().flatten().find_map(|form| {
            let denied = most_specific(&self.ranges, form)?;
            match most_specific(&self.allowed, form) {
                Some(open) if open.prefix >= denied.prefix => None,
                _ => Some(denied),
            }
        })
    }

    /// The denied ranges.
    pub fn ranges(&self) -> &[Cidr] {
        &self.ranges
    }

    /// The ranges opened inside them.
    pub fn allowed(&self) -> &[Cidr] {
        &self.allowed
    }

    /// Refuses `address` (an IP literal or a resolved address of `host`) if denied.
    pub fn check(&self, host: &str, address: IpAddr) -> Result<(), DeniedAddress> {
        match self.denies(address) {
            Some(range) => Err(DeniedAddress {
                host: host.to_string(),
                address,
                range,
            }),
            None => Ok(()),
        }
    }
}

/// Comma-separated ranges (spaces around them ignored; empty entries skipped).
pub fn parse_ranges(list: &str) -> Result<Vec<Cidr>, InvalidCidr> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Cidr::from_str)
        .collect()
}

fn write_ranges(f: &mut fmt::Formatter<'_>, ranges: &[Cidr]) -> fmt::Result {
    for (i, range) in ranges.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{range}")?;
    }
    Ok(())
}

impl fmt::Display for DenyList {
    /// The denied ranges, comma-separated, then `; allowed: …` when some are opened.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_ranges(f, &self.ranges)?;
        if !self.allowed.is_empty() {
            f.write_str("; allowed: ")?;
            write_ranges(f, &self.allowed)?;
        }
        Ok(())
    }
}

/// A connection refused by the deny list: the host, the address it is (or resolved to) and
/// the range that denies it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host} is {address}, in the denied range {range}")]
pub struct DeniedAddress {
    /// The host as written in the URL.
    pub host: String,
    /// The address refused.
    pub address: IpAddr,
    /// The range that denies it.
    pub range: Cidr,
}

/// The system resolver with denied addresses removed from every answer; a name with only
/// denied addresses fails with [`DeniedAddress`], before any connection.
pub(crate) struct FilteringResolver {
    pub(crate) deny: Arc<DenyList>,
}

impl Resolve for FilteringResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let deny = self.deny.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let mut allowed = Vec::new();
            let mut denied = None;
            for address in resolved {
                match deny.check(&host, address.ip()) {
                    Ok(()) => allowed.push(address),
                    Err(d) => {
                        denied.get_or_insert(d);
                    }
                }
            }
            match (allowed.is_empty(), denied) {
                (true, Some(denied)) => Err(Box::new(denied) as _),
                (true, None) => Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{host} has no address"),
                )) as _),
                (false, _) => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}
