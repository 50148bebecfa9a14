//! The torchrun-style launcher: the world read from `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `MASTER_ADDR` and `MASTER_PORT`, and the rendezvous that hands rank 0's bytes (an NCCL
//! id) to the other ranks over one TCP connection each.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// The world as the launcher describes it.
pub(crate) struct Launch {
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    addr: String,
}

fn var(op: &'static str, name: &str) -> Result<String> {
    std::env::var(name).map_err(|_| {
        Error::invalid(
            op,
            format!("{name} is not set (a torchrun-style launcher sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"),
        )
    })
}

fn number(op: &'static str, name: &str, value: &str) -> Result<usize> {
    value
        .trim()
        .parse()
        .map_err(|_| Error::invalid(op, format!("{name}={value} is not a number")))
}

impl Launch {
    pub fn from_env(op: &'static str) -> Result<Launch> {
        let rank = number(op, "RANK", &var(op, "RANK")?)?;
        let world = number(op, "WORLD_SIZE", &var(op, "WORLD_SIZE")?)?;
        let local_rank = match std::env::var("LOCAL_RANK") {
            Ok(v) => number(op, "LOCAL_RANK", &v)?,
            Err(_) => 0,
        };
        super::call::check_rank(op, "RANK", rank, world)?;
        let addr = format!("{}:{}", var(op, "MASTER_ADDR")?, var(op, "MASTER_PORT")?);
        Ok(Launch {
            rank,
            world,
            local_rank,
            addr,
        })
    }

    fn io(op: &'static str, what: &str, e: std::io::Error) -> Error {
        Error::Collective {
            op,
            reason: format!("rendezvous: {what}: {e}"),
        }
    }

    /// Rank 0: listens at the master address and sends `bytes` to each of the other ranks
    /// from a background thread (so rank 0 can go on to the collective init meanwhile).
    pub fn serve(&self, op: &'static str, bytes: &[u8; 128]) -> Result<()> {
        let listener = TcpListener::bind(&self.addr)
            .map_err(|e| Self::io(op, &format!("listening at {}", self.addr), e))?;
        let (bytes, others) = (*bytes, self.world - 1);
        std::thread::spawn(move || {
            for mut s in listener.incoming().take(others).flatten() {
                let _ = s.write_all(&bytes);
            }
        });
        Ok(())
    }

    /// Another rank: connects to rank 0 (retrying for up to `wait`) and reads its bytes.
    pub fn fetch(&self, op: &'static str, wait: Duration) -> Result<[u8; 128]> {
        let start = Instant::now();
        let addrs: Vec<_> = self
            .addr
            .to_socket_addrs()
            .map_err(|e| Self::io(op, &format!("resolving {}", self.addr), e))?
            .collect();
        loop {
            let attempt = addrs
                .iter()
                .find_map(|a| TcpStream::connect_timeout(a, Duration::from_secs(1)).ok());
            if let Some(mut s) = attempt {
                let mut out = [0u8; 128];
                s.read_exact(&mut out)
                    .map_err(|e| Self::io(op, "reading rank 0's id", e))?;
                return Ok(out);
            }
            if start.elapsed() > wait {
                return Err(Error::Collective {
                    op,
                    reason: format!("rank 0 did not answer at {} within {wait:?}", self.addr),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
