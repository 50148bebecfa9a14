//! Views made dense, and element-wise ops on broadcast operands, on the CPU: brotensor's
//! `contiguous()` / `copy_into` of a transposed matrix and of a permuted 4-d tensor against
//! the streaming copy of the same bytes (the physical limit), numpy and (with
//! `--features candle`) candle; `add_out` with a row- or column-broadcast operand against the
//! same add of two dense operands.
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_layout [--features candle]
//! [-- --rounds R] [-- --reps K] [-- --no-numpy]`.
//! numpy runs in one Python child process (`benches/layout_numpy.py`, interpreter from
//! `BROTENSOR_BENCH_PYTHON`, default `python3`) that this binary drives over a pipe, so every
//! contender, Rust or Python, runs one batch of K calls per round, in the same order each
//! round, and each figure is the median over R rounds (this VM's memory bandwidth flips
//! between two levels during a run; interleaving gives every contender the same share of
//! both). F32 throughout; GB/s count the bytes an op must read and write once (a copy or a
//! layout change: 1 read + 1 write of the tensor; add: 2 reads + 1 write of the full-size
//! tensor, also when one operand is a broadcast vector, so add ratios are time ratios).
//! brotensor materialises a broadcast operand once per view and keeps that copy with the
//! view, so the broadcast adds make a fresh view per call (as `add(x, v.broadcast_to(..))`
//! does), and one extra row reuses a single view (the cached copy: the dense add's speed).
//! The tensor-algebra cases (issue 13): `ops::transpose`, `reduce_sum` over axis 0 and over
//! the last axis (GB/s of the bytes read), `gather` of all rows in a shuffled order, and
//! `concatenate` of four 1024 x 4096 blocks, against numpy's `sum`, `take` and
//! `concatenate` into reused outputs.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use brotensor::{ops, Device, Tensor};

const N: usize = 4096;
const P4: [usize; 4] = [32, 128, 32, 128];
const PERM: [usize; 4] = [0, 2, 1, 3];

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One contender: runs a batch of `reps` calls and returns the seconds per call.
type Batch<'a> = Box<dyn FnMut(usize) -> f64 + 'a>;

/// Times `reps` calls of `f` (a Rust contender).
fn timed<'a>(mut f: impl FnMut() + 'a) -> Batch<'a> {
    Box::new(move |reps| {
        let t0 = Instant::now();
        for _ in 0..reps {
            f();
        }
        t0.elapsed().as_secs_f64() / reps as f64
    })
}

/// The numpy child process.
struct Numpy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    version: String,
}

impl Numpy {
    fn start() -> Result<Numpy, String> {
        let python = std::env::var("BROTENSOR_BENCH_PYTHON").unwrap_or("python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/layout_numpy.py");
        let mut child = Command::new(&python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {python}: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        let version = line
            .strip_prefix("ready ")
            .ok_or_else(|| format!("{script} did not start (numpy installed?)"))?
            .trim()
            .to_string();
        Ok(Numpy {
            child,
            stdin,
            stdout,
            version,
        })
    }

    /// Seconds per call of one batch of `case`.
    fn batch(&mut self, case: &str, reps: usize) -> f64 {
        writeln!(self.stdin, "{case} {reps}").expect("write to numpy");
        self.stdin.flush().expect("flush to numpy");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from numpy");
        line.trim()
            .parse()
            .unwrap_or_else(|_| panic!("numpy answered {line:?} for {case}"))
    }
}

impl Drop for Numpy {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// A numpy contender, run by the shared child process.
fn numpy<'a>(np: &'a std::cell::RefCell<Numpy>, case: &'static str) -> Batch<'a> {
    Box::new(move |reps| np.borrow_mut().batch(case, reps))
}

/// One table section: contenders timed against each other, bytes moved per call.
struct Case<'a> {
    name: &'static str,
    bytes: f64,
    contenders: Vec<(String, Batch<'a>)>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

fn host(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect()
}

/// `x[perm]`: the dims and row-major strides of `dims` permuted.
fn permuted(dims: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut strides = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    (
        perm.iter().map(|&p| dims[p]).collect(),
        perm.iter().map(|&p| strides[p]).collect(),
    )
}

/// Checks a dense result against the definition of the permuted view of `src`.
fn check_permuted(what: &str, got: &[f32], src: &[f32], dims: &[usize], perm: &[usize]) {
    let (pd, ps) = permuted(dims, perm);
    assert_eq!(got.len(), src.len(), "{what}: length");
    for (i, &g) in got.iter().enumerate() {
        let (mut rest, mut at) = (i, 0);
        for (&n, &s) in pd.iter().zip(&ps).rev() {
            at += (rest % n) * s;
            rest /= n;
        }
        assert_eq!(g, src[at], "{what}: element {i}");
    }
}

fn main() -> brotensor::Result<()> {
    let rounds: usize = arg("--rounds", 9);
    let reps: usize = arg("--reps", 3);
    let with_numpy = !std::env::args().any(|a| a == "--no-numpy");
    let cpu = Device::Cpu;
    let n = N * N;
    let tensor_bytes = (n * 4) as f64;

    let data = host(n);
    let x = Tensor::from_slice_nd_on(cpu, &data, &[N, N])?;
    let xt = x.transpose(0, 1)?;
    let x4 = Tensor::from_slice_nd_on(cpu, &data, &P4)?;
    let x4p = x4.permute(&PERM)?;
    let y = Tensor::from_slice_nd_on(
        cpu,
        &host(n)[..].iter().rev().copied().collect::<Vec<_>>(),
        &[N, N],
    )?;
    // A view keeps the dense copy an op made of it (`dispatch`), so a view used twice is
    // materialised once: the broadcast contenders make a fresh view per call (the cost of
    // `add(x, v.broadcast_to(..))`), and one more reuses one view (the cached copy).
    let row_vec = Tensor::from_slice_nd_on(cpu, &data[..N], &[N])?;
    let col_vec = Tensor::from_slice_nd_on(cpu, &data[..N], &[N, 1])?;
    let row = row_vec.broadcast_to(&[N, N])?;
    let col = col_vec.broadcast_to(&[N, N])?;

    // Results first: each contender must produce the permuted elements.
    check_permuted(
        "contiguous 2-d",
        &xt.contiguous()?.to_vec::<f32>()?,
        &data,
        &[N, N],
        &[1, 0],
    );
    check_permuted(
        "contiguous 4-d",
        &x4p.contiguous()?.to_vec::<f32>()?,
        &data,
        &P4,
        &PERM,
    );
    {
        let sum = ops::add(&x, &col)?.to_vec::<f32>()?;
        assert_eq!(
            sum[5 * N + 7],
            data[5 * N + 7] + data[5],
            "column broadcast"
        );
        let sum = ops::add(&x, &row)?.to_vec::<f32>()?;
        assert_eq!(sum[5 * N + 7], data[5 * N + 7] + data[7], "row broadcast");
    }

    let np = if with_numpy {
        match Numpy::start() {
            Ok(np) => Some(std::cell::RefCell::new(np)),
            Err(e) => {
                eprintln!("numpy skipped: {e}");
                None
            }
        }
    } else {
        None
    };

    #[cfg(feature = "candle")]
    let candle = {
        use candle_core::{Device as CDevice, Tensor as CTensor};
        let c = CTensor::from_vec(data.clone(), (N, N), &CDevice::Cpu).expect("candle tensor");
        let c4 = c
            .reshape((P4[0], P4[1], P4[2], P4[3]))
            .expect("candle reshape");
        let cy = CTensor::from_vec(y.to_vec::<f32>()?, (N, N), &CDevice::Cpu).expect("candle");
        let crow = CTensor::from_vec(data[..N].to_vec(), N, &CDevice::Cpu).expect("candle");
        let ccol = CTensor::from_vec(data[..N].to_vec(), (N, 1), &CDevice::Cpu).expect("candle");
        let flat = |t: CTensor| {
            t.flatten_all()
                .and_then(|t| t.to_vec1::<f32>())
                .expect("candle")
        };
        check_permuted(
            "candle 2-d",
            &flat(c.t().unwrap().contiguous().unwrap()),
            &data,
            &[N, N],
            &[1, 0],
        );
        let p = c4.permute((0, 2, 1, 3)).unwrap().contiguous().unwrap();
        check_permuted("candle 4-d", &flat(p), &data, &P4, &PERM);
        (c, c4, cy, crow, ccol)
    };

    // The reference: the copy of the same bytes, all cores, streaming stores.
    let src_bytes: Vec<u8> = data.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let mut dst_bytes = vec![0u8; src_bytes.len()];
    let copy = std::cell::RefCell::new(|| brotensor_cpu::cast::copy(&mut dst_bytes, &src_bytes));
    let copy_batch = || timed(|| (*copy.borrow_mut())());

    let mut out2 = Tensor::default();
    let mut out4 = Tensor::default();
    let mut sum = Tensor::default();
    let (mut s_row, mut s_col, mut s_reused) =
        (Tensor::default(), Tensor::default(), Tensor::default());

    // The tensor-algebra operands: a shuffled row order (row r to position r * 1031 mod N,
    // a permutation since 1031 is prime to 4096) and four row blocks.
    let order: Vec<i64> = (0..N as i64).map(|r| (r * 1031) % N as i64).collect();
    let order_t = Tensor::from_slice_nd_on(cpu, &order, &[N, 1])?;
    let rows = ops::GatherDims {
        offset_dims: vec![1],
        collapsed_slice_dims: vec![0],
        start_index_map: vec![0],
        index_vector_dim: 1,
    };
    let blocks: Vec<Tensor> = (0..4)
        .map(|i| Tensor::from_slice_nd_on(cpu, &data[i * n / 4..(i + 1) * n / 4], &[N / 4, N]))
        .collect::<brotensor::Result<_>>()?;
    {
        let g = ops::gather(&x, &order_t, &rows, &[1, N])?.to_vec::<f32>()?;
        assert_eq!(
            g[5 * N..6 * N],
            data[order[5] as usize * N..][..N],
            "gather rows"
        );
        let refs: Vec<&Tensor> = blocks.iter().collect();
        assert_eq!(
            ops::concatenate(&refs, 0)?.to_vec::<f32>()?,
            data,
            "concatenate"
        );
        let s0 = ops::reduce_sum(&x, 0)?.to_vec::<f32>()?;
        let want: f64 = (0..N).map(|r| data[r * N + 3] as f64).sum();
        assert!(
            (s0[3] as f64 - want).abs() < 1e-3 * want.abs().max(1.0),
            "reduce_sum axis 0"
        );
        let s1 = ops::reduce_sum(&x, 1)?.to_vec::<f32>()?;
        let want: f64 = data[3 * N..4 * N].iter().map(|&v| v as f64).sum();
        assert!(
            (s1[3] as f64 - want).abs() < 1e-3 * want.abs().max(1.0),
            "reduce_sum axis 1"
        );
    }
    let (mut r0, mut r1) = (Tensor::default(), Tensor::default());

    let mut cases: Vec<Case> = Vec::new();
    {
        let mut c: Vec<(String, Batch)> = vec![
            ("copy (streaming, reference)".into(), copy_batch()),
            (
                "brotensor contiguous()".into(),
                timed(|| drop(xt.contiguous().unwrap())),
            ),
            (
                "brotensor copy_into (reused out)".into(),
                timed(|| ops::copy_into(&xt, &mut out2).unwrap()),
            ),
            (
                "brotensor ops::transpose(x, [1, 0])".into(),
                timed(|| drop(ops::transpose(&x, &[1, 0]).unwrap())),
            ),
        ];
        if let Some(np) = &np {
            c.push(("numpy ascontiguousarray(x.T)".into(), numpy(np, "t2d")));
            c.push(("numpy copyto(out, x.T)".into(), numpy(np, "t2d_out")));
        }
        #[cfg(feature = "candle")]
        c.push((
            "candle t()?.contiguous()?".into(),
            timed(|| drop(candle.0.t().unwrap().contiguous().unwrap())),
        ));
        cases.push(Case {
            name: "transpose 4096x4096",
            bytes: 2.0 * tensor_bytes,
            contenders: c,
        });
    }
    {
        let mut c: Vec<(String, Batch)> = vec![
            ("copy (streaming, reference)".into(), copy_batch()),
            (
                "brotensor contiguous()".into(),
                timed(|| drop(x4p.contiguous().unwrap())),
            ),
            (
                "brotensor copy_into (reused out)".into(),
                timed(|| ops::copy_into(&x4p, &mut out4).unwrap()),
            ),
        ];
        if let Some(np) = &np {
            c.push((
                "numpy ascontiguousarray(x.transpose(0,2,1,3))".into(),
                numpy(np, "p4d"),
            ));
            c.push((
                "numpy copyto(out, x.transpose(0,2,1,3))".into(),
                numpy(np, "p4d_out"),
            ));
        }
        #[cfg(feature = "candle")]
        c.push((
            "candle permute((0,2,1,3))?.contiguous()?".into(),
            timed(|| {
                drop(
                    candle
                        .1
                        .permute((0, 2, 1, 3))
                        .unwrap()
                        .contiguous()
                        .unwrap(),
                )
            }),
        ));
        cases.push(Case {
            name: "permute (32,128,32,128) -> (0,2,1,3)",
            bytes: 2.0 * tensor_bytes,
            contenders: c,
        });
    }
    {
        let mut c: Vec<(String, Batch)> = vec![
            ("copy (streaming, reference)".into(), copy_batch()),
            (
                "brotensor add_out, dense + dense".into(),
                timed(|| ops::add_out(&x, &y, &mut sum).unwrap()),
            ),
            (
                "brotensor add_out, dense + row (4096,) broadcast, fresh view".into(),
                timed(|| {
                    let v = row_vec.broadcast_to(&[N, N]).unwrap();
                    ops::add_out(&x, &v, &mut s_row).unwrap()
                }),
            ),
            (
                "brotensor add_out, dense + column (4096,1) broadcast, fresh view".into(),
                timed(|| {
                    let v = col_vec.broadcast_to(&[N, N]).unwrap();
                    ops::add_out(&x, &v, &mut s_col).unwrap()
                }),
            ),
            (
                "brotensor add_out, dense + row broadcast, one view reused".into(),
                timed(|| ops::add_out(&x, &row, &mut s_reused).unwrap()),
            ),
        ];
        if let Some(np) = &np {
            c.push(("numpy add(x, y, out=)".into(), numpy(np, "add_dense")));
            c.push(("numpy add(x, row, out=)".into(), numpy(np, "add_row")));
            c.push(("numpy add(x, col, out=)".into(), numpy(np, "add_col")));
        }
        #[cfg(feature = "candle")]
        {
            c.push((
                "candle (x + y)".into(),
                timed(|| drop((&candle.0 + &candle.2).unwrap())),
            ));
            c.push((
                "candle x.broadcast_add(row)".into(),
                timed(|| drop(candle.0.broadcast_add(&candle.3).unwrap())),
            ));
            c.push((
                "candle x.broadcast_add(col)".into(),
                timed(|| drop(candle.0.broadcast_add(&candle.4).unwrap())),
            ));
        }
        cases.push(Case {
            name: "add 4096x4096",
            bytes: 3.0 * tensor_bytes,
            contenders: c,
        });
    }

    for (name, axis, case) in [
        ("reduce_sum axis 0, 4096x4096", 0usize, "sum0"),
        ("reduce_sum axis 1, 4096x4096", 1, "sum1"),
    ] {
        let out = if axis == 0 { &mut r0 } else { &mut r1 };
        let out = std::cell::RefCell::new(std::mem::take(out));
        let mut c: Vec<(String, Batch)> = vec![
            ("copy (streaming, reference)".into(), copy_batch()),
            (
                format!("brotensor reduce_sum_out(x, {axis}) (reused out)"),
                Box::new({
                    let x = &x;
                    move |reps| {
                        let t0 = Instant::now();
                        for _ in 0..reps {
                            ops::reduce_sum_out(x, axis, &mut out.borrow_mut()).unwrap();
                        }
                        t0.elapsed().as_secs_f64() / reps as f64
                    }
                }),
            ),
        ];
        if let Some(np) = &np {
            c.push((format!("numpy sum(x, axis={axis}, out=)"), numpy(np, case)));
        }
        cases.push(Case {
            name,
            bytes: tensor_bytes,
            contenders: c,
        });
    }
    {
        let mut c: Vec<(String, Batch)> = vec![
            ("copy (streaming, reference)".into(), copy_batch()),
            (
                "brotensor gather (all rows, shuffled)".into(),
                timed(|| drop(ops::gather(&x, &order_t, &rows, &[1, N]).unwrap())),
            ),
        ];
        if let Some(np) = &np {
            c.push((
                "numpy take(x, order, axis=0, out=)".into(),
                numpy(np, "take"),
            ));
        }
        cases.push(Case {
            name: "gather rows 4096x4096",
            bytes: 2.0 * tensor_bytes,
            contenders: c,
        });
    }
    {
        let refs: Vec<&Tensor> = blocks.iter().collect();
        let mut c: Vec<(String, Batch)> = vec![
            ("copy (streaming, reference)".into(), copy_batch()),
            (
                "brotensor concatenate (4 x 1024x4096, axis 0)".into(),
                timed(move || drop(ops::concatenate(&refs, 0).unwrap())),
            ),
        ];
        if let Some(np) = &np {
            c.push((
                "numpy concatenate(blocks, axis=0, out=)".into(),
                numpy(np, "concat"),
            ));
        }
        cases.push(Case {
            name: "concatenate to 4096x4096",
            bytes: 2.0 * tensor_bytes,
            contenders: c,
        });
    }

    // One warm-up call of everything, then the rounds.
    for case in &mut cases {
        for (_, f) in &mut case.contenders {
            f(1);
        }
    }
    let mut times: Vec<Vec<Vec<f64>>> = cases
        .iter()
        .map(|c| vec![Vec::with_capacity(rounds); c.contenders.len()])
        .collect();
    for _ in 0..rounds {
        for (case, t) in cases.iter_mut().zip(&mut times) {
            for ((_, f), t) in case.contenders.iter_mut().zip(t.iter_mut()) {
                t.push(f(reps));
            }
        }
    }

    let threads = rayon::current_num_threads();
    println!("# bench_layout: CPU (rayon, {threads} threads), F32, median of {rounds} rounds of {reps} calls per contender");
    if let Some(np) = &np {
        println!("# numpy {}", np.borrow().version);
    }
    println!();
    println!("| case | contender | ms (median) | ms (min-max) | GB/s | vs copy |");
    println!("|---|---|---:|---:|---:|---:|");
    for (case, t) in cases.iter().zip(&times) {
        let copy_s = median(t[0].clone());
        let copy_gbs = 2.0 * tensor_bytes / copy_s / 1e9;
        for ((name, _), t) in case.contenders.iter().zip(t) {
            let s = median(t.clone());
            let lo = t.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = t.iter().copied().fold(0.0, f64::max);
            let bytes = if name.starts_with("copy") {
                2.0 * tensor_bytes
            } else {
                case.bytes
            };
            let gbs = bytes / s / 1e9;
            println!(
                "| {} | {name} | {:.3} | {:.3}-{:.3} | {gbs:.1} | {:.2} |",
                case.name,
                s * 1e3,
                lo * 1e3,
                hi * 1e3,
                gbs / copy_gbs
            );
        }
    }
    println!();
    // Speed-ups of the second contender (brotensor's allocating form) over the others.
    for (case, t) in cases.iter().zip(&times) {
        let ours = median(t[1].clone());
        let ours_name = &case.contenders[1].0;
        for ((name, _), t) in case.contenders.iter().zip(t).skip(2) {
            println!(
                "{}: {name} takes {:.2}x the time of {ours_name}",
                case.name,
                median(t.clone()) / ours
            );
        }
    }
    Ok(())
}
