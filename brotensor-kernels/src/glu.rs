//! Gated linear units over rows of `(B, 2D)`: `a` = columns `[0, D)`, `g` = `[D, 2D)`,
//! output `(B, D)`; the backward writes `[d a | d g]` in the input's layout. One kernel per
//! direction, with the math supplied by a [`GluOp`].

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::elementwise::{
    gelu, gelu_derivative, gelu_exact, gelu_exact_derivative, silu, silu_derivative,
};
use crate::launch::{extent, grid_1d, vector_size_for, Buf, LaunchError};

/// The math of a gated unit on widened vectors.
#[cube]
pub trait GluOp: 'static + Send + Sync {
    /// The unit's output.
    fn forward<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>) -> Vector<f32, N>;
    /// The gradient with respect to `a`.
    fn grad_a<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>, dy: Vector<f32, N>) -> Vector<f32, N>;
    /// The gradient with respect to `g`.
    fn grad_g<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>, dy: Vector<f32, N>) -> Vector<f32, N>;
}

/// `a * gelu_tanh(g)`.
pub struct Geglu;
/// `a * gelu_exact(g)`.
pub struct GegluExact;
/// `silu(a) * g`.
pub struct Swiglu;

#[cube]
impl GluOp for Geglu {
    fn forward<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>) -> Vector<f32, N> {
        a * gelu::<N>(g)
    }
    fn grad_a<N: Size>(
        _a: Vector<f32, N>,
        g: Vector<f32, N>,
        dy: Vector<f32, N>,
    ) -> Vector<f32, N> {
        dy * gelu::<N>(g)
    }
    fn grad_g<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>, dy: Vector<f32, N>) -> Vector<f32, N> {
        dy * a * gelu_derivative::<N>(g)
    }
}

#[cube]
impl GluOp for GegluExact {
    fn forward<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>) -> Vector<f32, N> {
        a * gelu_exact::<N>(g)
    }
    fn grad_a<N: Size>(
        _a: Vector<f32, N>,
        g: Vector<f32, N>,
        dy: Vector<f32, N>,
    ) -> Vector<f32, N> {
        dy * gelu_exact::<N>(g)
    }
    fn grad_g<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>, dy: Vector<f32, N>) -> Vector<f32, N> {
        dy * a * gelu_exact_derivative::<N>(g)
    }
}

#[cube]
impl GluOp for Swiglu {
    fn forward<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>) -> Vector<f32, N> {
        silu::<N>(a) * g
    }
    fn grad_a<N: Size>(a: Vector<f32, N>, g: Vector<f32, N>, dy: Vector<f32, N>) -> Vector<f32, N> {
        dy * g * silu_derivative::<N>(a)
    }
    fn grad_g<N: Size>(
        a: Vector<f32, N>,
        _g: Vector<f32, N>,
        dy: Vector<f32, N>,
    ) -> Vector<f32, N> {
        dy * silu::<N>(a)
    }
}

/// Unit `i` handles output vector `i`: row `i / d`, vector column `i % d` (`d` in vectors).
#[cube(launch_unchecked)]
fn glu_forward_kernel<F: Float, N: Size, O: GluOp>(
    x: &Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    d: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let row = i / d;
        let col = i % d;
        let a = Vector::<f32, N>::cast_from(x[row * 2 * d + col]);
        let g = Vector::<f32, N>::cast_from(x[row * 2 * d + d + col]);
        y[i] = Vector::cast_from(O::forward::<N>(a, g));
    }
}

#[cube(launch_unchecked)]
fn glu_backward_kernel<F: Float, N: Size, O: GluOp>(
    x: &Array<Vector<F, N>>,
    dy: &Array<Vector<F, N>>,
    dx: &mut Array<Vector<F, N>>,
    d: usize,
) {
    let i = ABSOLUTE_POS;
    if i < dy.len() {
        let row = i / d;
        let col = i % d;
        let ia = row * 2 * d + col;
        let a = Vector::<f32, N>::cast_from(x[ia]);
        let g = Vector::<f32, N>::cast_from(x[ia + d]);
        let gy = Vector::<f32, N>::cast_from(dy[i]);
        dx[ia] = Vector::cast_from(O::grad_a::<N>(a, g, gy));
        dx[ia + d] = Vector::cast_from(O::grad_g::<N>(a, g, gy));
    }
}

/// `y (rows, d) = glu(x (rows, 2d))`.
pub fn launch_glu_forward<R: Runtime, F: Float + CubeElement, O: GluOp>(
    client: &ComputeClient<R>,
    x: &Handle,
    y: &Handle,
    rows: usize,
    d: usize,
) -> Result<(), LaunchError> {
    let len = extent("rows * d", &[rows, d])?;
    if len == 0 {
        return Ok(());
    }
    let x_len = extent("2 * rows * d", &[2, len])?;
    let bytes = core::mem::size_of::<F>();
    let x = Buf::new("x", x, x_len, bytes)?;
    let y = Buf::new("y", y, len, bytes)?;
    let vs = vector_size_for(d, crate::MAX_VECTOR_SIZE);
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: x holds 2*len and y len elements (checked `Buf`s); units past `y.len()`
    // return, and every index formed is below `2 * rows * d`.
    unsafe {
        glu_forward_kernel::launch_unchecked::<F, O, R>(
            client,
            count,
            dim,
            vs,
            x.arg(),
            y.arg(),
            d / vs,
        );
    }
    Ok(())
}

/// `dx (rows, 2d) = [d a | d g]` from `x (rows, 2d)` and `dy (rows, d)`.
pub fn launch_glu_backward<R: Runtime, F: Float + CubeElement, O: GluOp>(
    client: &ComputeClient<R>,
    x: &Handle,
    dy: &Handle,
    dx: &Handle,
    rows: usize,
    d: usize,
) -> Result<(), LaunchError> {
    let len = extent("rows * d", &[rows, d])?;
    if len == 0 {
        return Ok(());
    }
    let x_len = extent("2 * rows * d", &[2, len])?;
    let bytes = core::mem::size_of::<F>();
    let x = Buf::new("x", x, x_len, bytes)?;
    let dy = Buf::new("dy", dy, len, bytes)?;
    let dx = Buf::new("dx", dx, x_len, bytes)?;
    let vs = vector_size_for(d, crate::MAX_VECTOR_SIZE);
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: as in `launch_glu_forward`.
    unsafe {
        glu_backward_kernel::launch_unchecked::<F, O, R>(
            client,
            count,
            dim,
            vs,
            x.arg(),
            dy.arg(),
            dx.arg(),
            d / vs,
        );
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    macro_rules! each_op {
        ($($op:ident),* => |$O:ident| $body:expr) => {{$({
            type $O = $op;
            $body
        })*}};
    }
    let c = l.client.clone();
    let a = L::array;
    for vs in L::vector_sizes() {
        for_floats!(|F| each_op!(Geglu, GegluExact, Swiglu => |O| {
            l.lower(glu_forward_kernel::GluForwardKernel::<F, O, Rt>::new(
                L::settings_1d(), c.clone(), a(), a(), (), vs));
            l.lower(glu_backward_kernel::GluBackwardKernel::<F, O, Rt>::new(
                L::settings_1d(), c.clone(), a(), a(), a(), (), vs));
        }));
    }
}
