//! `_out` and in-place ops reuse their destination: a 100-step loop keeps one buffer.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_tests::{gpu_devices, read_f32};

#[test]
fn a_hundred_steps_keep_every_destination_buffer() {
    for d in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let n = 4096;
        let x = Tensor::from_slice_on(d, &vec![0.5f32; n], 64, 64).unwrap();
        let mut acc = Tensor::zeros_on(d, 64, 64, Dtype::F32).unwrap();
        let mut tmp = Tensor::default();
        let mut grad = Tensor::default();
        ops::mul_out(&x, &x, &mut tmp).unwrap();
        ops::exp_backward(&x, &x, &mut grad).unwrap();
        let ids = (
            acc.allocation_id(),
            tmp.allocation_id(),
            grad.allocation_id(),
        );
        for step in 0..100 {
            ops::mul_out(&x, &x, &mut tmp).unwrap(); // 0.25
            acc.add_(&tmp).unwrap();
            ops::scale_inplace(&mut acc, 1.0).unwrap();
            ops::exp_backward(&x, &tmp, &mut grad).unwrap();
            ops::axpby_inplace(&mut acc, &grad, 1.0, 0.0).unwrap();
            assert_eq!(
                (
                    acc.allocation_id(),
                    tmp.allocation_id(),
                    grad.allocation_id()
                ),
                ids,
                "{d}: a buffer moved at step {step}"
            );
        }
        let got = read_f32(&acc).unwrap();
        assert!(
            got.iter().all(|&v| (v - 25.0).abs() < 1e-3),
            "{d}: {}",
            got[0]
        );
        // Shrinking keeps the allocation; growing past the capacity replaces it.
        let cap = acc.capacity_bytes();
        acc.resize(8, 8, Dtype::F16).unwrap();
        assert_eq!((acc.allocation_id(), acc.capacity_bytes()), (ids.0, cap));
        acc.resize(64, 64, Dtype::F32).unwrap();
        assert_eq!(
            acc.allocation_id(),
            ids.0,
            "{d}: back to the high-water mark"
        );
        acc.resize(65, 64, Dtype::F32).unwrap();
        assert_ne!(acc.allocation_id(), ids.0, "{d}: growing reallocates");
    }
}
