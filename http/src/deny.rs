//! Addresses a client never connects to (`hub-node --outbound-deny`), and the resolver that
//! enforces the list on resolved addresses.

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

/// Address ranges a client never connects to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DenyList {
    ranges: Vec<Cidr>,
}

impl DenyList {
    /// `hub-node`'s default: link-local addresses (where cloud metadata services answer,
    /// e.g. 169.254.169.254) and the metadata addresses outside them (Alibaba Cloud's
    /// 100.100.100.200, AWS's IPv6 fd00:ec2::254).
    pub const DEFAULT: &'static str =
        "169.254.0.0/16,fe80::/10,100.100.100.200/32,fd00:ec2::254/128";

    /// Nothing denied.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses comma-separated ranges (spaces around them are ignored); an empty text denies
    /// nothing.
    pub fn parse(list: &str) -> Result<Self, InvalidCidr> {
        let ranges = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Cidr::from_str)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { ranges })
    }

    /// The range that denies `address`, if any.
    pub fn denies(&self, address: IpAddr) -> Option<Cidr> {
        self.ranges.iter().copied().find(|r| r.contains(address))
    }

    /// The ranges.
    pub fn ranges(&self) -> &[Cidr] {
        &self.ranges
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

impl fmt::Display for DenyList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
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
