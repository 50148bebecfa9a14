//! Zero-element and uncommitted tensors work in every op and are told apart.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_tests::gpu_devices;

#[test]
fn uncommitted_and_empty_tensors_are_distinct() {
    let u = Tensor::default();
    assert!(!u.is_committed());
    assert_eq!(
        (u.shape(), u.allocation_id(), u.capacity_bytes()),
        ((0, 0), None, 0)
    );
    assert_eq!(u.to_vec::<f32>().unwrap(), Vec::<f32>::new());
    assert!(!u.to(Device::Cpu).unwrap().is_committed());
    for d in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let e = Tensor::zeros_on(d, 0, 5, Dtype::F32).unwrap();
        assert!(e.is_committed());
        assert_eq!((e.shape(), e.numel(), e.storage_bytes()), ((0, 5), 0, 0));
        assert!(e.allocation_id().is_some());
        assert_eq!(e.to_vec::<f32>().unwrap(), Vec::<f32>::new());
        let moved = e.to(Device::Cpu).unwrap();
        assert!(moved.is_committed() && moved.shape() == (0, 5));
    }
}

#[test]
fn every_elementwise_op_accepts_zero_elements() {
    for d in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let e = Tensor::zeros_on(d, 3, 0, Dtype::F32).unwrap();
        let mut y = e.clone();
        let check = |t: brotensor::Result<Tensor>, what: &str| {
            let t = t.unwrap_or_else(|err| panic!("{what} on {d}: {err}"));
            assert_eq!(
                (t.shape(), t.device(), t.is_committed()),
                ((3, 0), d, true),
                "{what}"
            );
        };
        check(ops::add(&e, &e), "add");
        check(ops::div_scalar(&e, 2.0), "div_scalar");
        check(ops::exp(&e), "exp");
        check(e.to_dtype(Dtype::F16), "cast");
        let mut dx = Tensor::default();
        ops::rsqrt_backward(&e, &e, &mut dx).unwrap();
        assert_eq!((dx.shape(), dx.device()), ((3, 0), d));
        y.add_(&e).unwrap();
        y.round_().unwrap();
        ops::clamp(&mut y, 0.0, 1.0).unwrap();
        ops::fill(&mut y, 3.0).unwrap();
        ops::axpby_inplace(&mut y, &e, 2.0, 1.0).unwrap();
        assert_eq!(y.shape(), (3, 0));
    }
}

#[test]
fn uncommitted_inputs_behave_as_empty() {
    let u = Tensor::default();
    let out = ops::add(&u, &u).unwrap();
    assert!(out.is_committed());
    assert_eq!((out.shape(), out.device()), ((0, 0), Device::Cpu));
    let mut z = Tensor::default();
    z.zero().unwrap();
    assert!(z.is_committed());
}
