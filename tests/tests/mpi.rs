//! The collectives' conformance suite on the MPI engine. Run by cargo, it launches itself
//! under `mpirun -np 2` and `-np 3` (loopback, shared memory) and checks that every rank
//! passed; under `mpirun`, each process is one rank and runs the suite on the CPU and on
//! every GPU device, then checks that a rank left alone times out.

use std::time::Duration;

use brotensor::distributed::{Communicator, MpiComm};
use brotensor::{Device, Error};
use brotensor_tests::collectives::conformance;
use brotensor_tests::{gpu_devices, launched_by_mpirun, mpirun_self};

const TIMEOUT: Duration = Duration::from_secs(60);

fn rank_main() -> Result<String, String> {
    let comm = MpiComm::init()
        .map_err(|e| e.to_string())?
        .with_timeout(TIMEOUT);
    let devices: Vec<Device> = std::iter::once(Device::Cpu).chain(gpu_devices()).collect();
    for &device in &devices {
        conformance(&comm, device, TIMEOUT)?;
    }
    // Rank 0 waits alone at a barrier with a short timeout; the others join late, which
    // completes the abandoned exchange before MPI is finalised.
    let short = MpiComm::with_timeout(comm, Duration::from_millis(300));
    if short.rank() == 0 && short.world_size() > 1 {
        match short.barrier() {
            Err(Error::Collective { reason, .. }) if reason.contains("unusable") => {}
            other => return Err(format!("a lone barrier: {other:?}")),
        }
        match short.barrier() {
            Err(Error::Collective { reason, .. }) if reason.contains("unusable") => {}
            other => return Err(format!("a call after the timeout: {other:?}")),
        }
        std::thread::sleep(Duration::from_millis(1500));
    } else {
        std::thread::sleep(Duration::from_millis(800));
        let late = short.with_timeout(TIMEOUT);
        late.barrier().map_err(|e| e.to_string())?;
        return Ok(format!("conformance passed on {devices:?}"));
    }
    Ok(format!("conformance passed on {devices:?}"))
}

fn main() {
    if launched_by_mpirun() {
        let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_default();
        match rank_main() {
            Ok(msg) => println!("rank {rank}: {msg}"),
            Err(e) => {
                println!("rank {rank}: FAILED: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    for ranks in [2, 3] {
        let text = mpirun_self(ranks, Duration::from_secs(600));
        for r in 0..ranks {
            assert!(
                text.contains(&format!("rank {r}: conformance passed")),
                "mpirun -np {ranks}: rank {r} did not pass:\n{text}"
            );
        }
        println!("mpi: {ranks} ranks passed the conformance suite");
    }
}
