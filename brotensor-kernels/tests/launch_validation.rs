//! The launch boundary refuses buffers shorter than the launch, before any `unsafe` launch,
//! and in-place (aliased) launches compute what separate buffers would.

use brotensor_kernels::bf16_words;
use brotensor_kernels::elementwise::{self as k, Source};
use brotensor_kernels::LaunchError;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

/// A client on the software Vulkan adapter; `None` (with a note) where there is none, unless
/// `BROTENSOR_REQUIRE_GPU` asks for wgpu.
fn client() -> Option<ComputeClient<WgpuRuntime>> {
    let found = std::panic::catch_unwind(|| WgpuRuntime::client(&WgpuDevice::Cpu)).ok();
    if found.is_none() {
        let required = std::env::var("BROTENSOR_REQUIRE_GPU").unwrap_or_default();
        assert!(
            !matches!(required.as_str(), "wgpu" | "any"),
            "no software wgpu adapter"
        );
        eprintln!("launch_validation: SKIPPED (no software wgpu adapter)");
    }
    found
}

fn read(client: &ComputeClient<WgpuRuntime>, h: cubecl::server::Handle, n: usize) -> Vec<f32> {
    let bytes = client.read_one(h).unwrap();
    f32::from_bytes(&bytes)[..n].to_vec()
}

#[test]
fn short_buffers_are_refused_before_launch() {
    let Some(c) = client() else { return };
    let x = c.create_from_slice(f32::as_bytes(&[1.0f32; 8]));
    let out = c.empty(8 * 4);
    for len in [9, 1000] {
        match k::launch_unary::<_, f32, k::Exp>(&c, Source::Buffer(&x), &out, len, 0.0, 0.0) {
            Err(LaunchError::BufferTooSmall {
                arg: "x",
                needed,
                available,
            }) => {
                assert_eq!((needed, available), (len as u64 * 4, 32));
            }
            other => panic!("len {len}: expected BufferTooSmall, got {other:?}"),
        }
    }
    let big = c.create_from_slice(f32::as_bytes(&[1.0f32; 64]));
    assert!(matches!(
        k::launch_binary::<_, f32, k::Add>(
            &c,
            Source::Buffer(&big),
            Source::Buffer(&big),
            &out,
            64,
            0.0,
            0.0
        ),
        Err(LaunchError::BufferTooSmall { arg: "out", .. })
    ));
    assert!(matches!(
        k::launch_cast::<_, f32, half::f16>(&c, &x, &out, 17),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    assert!(matches!(
        bf16_words::launch_words_to_float::<_, f32>(&c, &x, &out, 17),
        Err(LaunchError::BufferTooSmall { .. })
    ));
    // Snake's per-channel parameters must hold C values, its tensors `len`.
    let two = c.create_from_slice(f32::as_bytes(&[0.5f32; 2]));
    assert!(matches!(
        brotensor_kernels::snake::launch_snake_forward(&c, &x, &x, &two, &out, 8, 4, 2),
        Err(LaunchError::BufferTooSmall { arg: "d", .. })
    ));
    assert!(matches!(
        brotensor_kernels::snake::launch_snake_backward(
            &c,
            &x,
            &x,
            &x,
            &x,
            &out,
            &out,
            &two,
            (8, 2, 4)
        ),
        Err(LaunchError::BufferTooSmall { arg: "gb", .. })
    ));
    // BatchNorm's per-channel arrays must hold C values.
    let stats = brotensor_kernels::batch_norm::BatchNormStats {
        running_mean: &x,
        running_var: &x,
        saved_mean: &x,
        saved_rstd: &two,
    };
    assert!(matches!(
        brotensor_kernels::batch_norm::launch_batch_norm(
            &c,
            (&x, &x, &x, &out),
            stats,
            (2, 4, 1),
            1e-5,
            0.1
        ),
        Err(LaunchError::BufferTooSmall {
            arg: "saved_rstd",
            ..
        })
    ));
    // A valid launch on the same buffers still works and writes exactly its elements.
    k::launch_unary::<_, f32, k::AddScalar>(&c, Source::Buffer(&x), &out, 8, 2.0, 0.0).unwrap();
    assert_eq!(read(&c, out, 8), vec![3.0; 8]);
}

#[test]
fn aliased_in_place_launches_match_separate_buffers() {
    let Some(c) = client() else { return };
    let data: Vec<f32> = (0..1027).map(|i| i as f32 * 0.01 - 5.0).collect();
    let y = c.create_from_slice(f32::as_bytes(&data));
    let x = c.create_from_slice(f32::as_bytes(&data));
    let sep = c.empty(data.len() * 4);
    k::launch_binary::<_, f32, k::Axpby>(
        &c,
        Source::Buffer(&y),
        Source::Buffer(&x),
        &sep,
        data.len(),
        0.5,
        2.0,
    )
    .unwrap();
    k::launch_binary::<_, f32, k::Axpby>(
        &c,
        Source::Output,
        Source::Buffer(&x),
        &y,
        data.len(),
        0.5,
        2.0,
    )
    .unwrap();
    let want: Vec<f32> = data.iter().map(|v| 0.5 * v + 2.0 * v).collect();
    assert_eq!(read(&c, sep, data.len()), want);
    assert_eq!(read(&c, y, data.len()), want);
}
