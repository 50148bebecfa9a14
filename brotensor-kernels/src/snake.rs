//! Snake (and snakebeta) over `(N, C*L)` FP32 tensors in NCL order: element `i` belongs to
//! channel `(i / L) % C`. `y = x + sin^2(alpha_c x) / guard(d_c)`, with `d = beta` for
//! snakebeta and `d = alpha` otherwise, and `guard` flooring `|d|` at 1e-9 with its sign.
//! One unit per element; the per-channel parameters are read, and the guard computed, in the
//! kernel, so no parameter ever travels through the host.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_divisors, grid_1d, Buf, LaunchError};

/// `1 / guard(d)`: `|d|` floored at 1e-9, its sign kept (0 counts as positive).
#[cube]
fn guarded_reciprocal(d: f32) -> f32 {
    let mut g = f32::min(d, -1e-9f32);
    if d >= 0.0f32 {
        g = f32::max(d, 1e-9f32);
    }
    1.0f32 / g
}

#[cube(launch_unchecked)]
fn snake_forward_kernel(
    x: &Array<f32>,
    alpha: &Array<f32>,
    d: &Array<f32>,
    y: &mut Array<f32>,
    c: usize,
    l: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let ch = (i / l) % c;
        let v = x[i];
        let s = f32::sin(alpha[ch] * v);
        y[i] = v + s * s * guarded_reciprocal(d[ch]);
    }
}

/// `dx = dy (1 + 2 a r s c)`, `ga = dy 2 r x s c`, `gb = -dy r^2 s^2` (`s`, `c` = sin, cos of
/// `a x`, `r = 1 / guard(d)`): the gradient and the per-element terms of `alpha`'s and `d`'s.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn snake_backward_kernel(
    x: &Array<f32>,
    alpha: &Array<f32>,
    d: &Array<f32>,
    dy: &Array<f32>,
    dx: &mut Array<f32>,
    ga: &mut Array<f32>,
    gb: &mut Array<f32>,
    c: usize,
    l: usize,
) {
    let i = ABSOLUTE_POS;
    if i < dx.len() {
        let ch = (i / l) % c;
        let a = alpha[ch];
        let r = guarded_reciprocal(d[ch]);
        let v = x[i];
        let g = dy[i];
        let s = f32::sin(a * v);
        let co = f32::cos(a * v);
        dx[i] = g * (1.0f32 + 2.0f32 * a * r * s * co);
        ga[i] = g * 2.0f32 * r * v * s * co;
        gb[i] = -g * r * r * s * s;
    }
}

/// `y = snake(x)` over `len` elements (`len` a multiple of `c * l`), `alpha` and `d` of `c`
/// values each (`d` is `alpha` itself for plain snake).
#[allow(clippy::too_many_arguments)]
pub fn launch_snake_forward<R: Runtime>(
    client: &ComputeClient<R>,
    x: &Handle,
    alpha: &Handle,
    d: &Handle,
    y: &Handle,
    len: usize,
    c: usize,
    l: usize,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    check_divisors(&[("c", c), ("l", l)])?;
    let x = Buf::new("x", x, len, 4)?;
    let y = Buf::new("y", y, len, 4)?;
    let alpha = Buf::new("alpha", alpha, c, 4)?;
    let d = Buf::new("d", d, c, 4)?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: x and y hold `len` floats, alpha and d `c` (checked `Buf`s); units past `len`
    // return, and every channel index is `% c`; `l` and `c` are nonzero (checked).
    unsafe {
        snake_forward_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            x.arg(),
            alpha.arg(),
            d.arg(),
            y.arg(),
            c,
            l,
        );
    }
    Ok(())
}

/// The per-element part of snake's backward: `dx` (overwritten) and the parameter terms
/// `ga` (of `alpha` through `sin(alpha x)`) and `gb` (of `d` through `1/d`), which the caller
/// sums per channel.
#[allow(clippy::too_many_arguments)]
pub fn launch_snake_backward<R: Runtime>(
    client: &ComputeClient<R>,
    x: &Handle,
    alpha: &Handle,
    d: &Handle,
    dy: &Handle,
    dx: &Handle,
    ga: &Handle,
    gb: &Handle,
    (len, c, l): (usize, usize, usize),
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    check_divisors(&[("c", c), ("l", l)])?;
    let x = Buf::new("x", x, len, 4)?;
    let dy = Buf::new("dy", dy, len, 4)?;
    let dx = Buf::new("dx", dx, len, 4)?;
    let ga = Buf::new("ga", ga, len, 4)?;
    let gb = Buf::new("gb", gb, len, 4)?;
    let alpha = Buf::new("alpha", alpha, c, 4)?;
    let d = Buf::new("d", d, c, 4)?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: every tensor argument holds `len` floats and the parameters `c` (checked
    // `Buf`s); units past `len` return, and channel indices are `% c`.
    unsafe {
        snake_backward_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            x.arg(),
            alpha.arg(),
            d.arg(),
            dy.arg(),
            dx.arg(),
            ga.arg(),
            gb.arg(),
            c,
            l,
        );
    }
    Ok(())
}

/// Every kernel of this file, lowered to CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    l.lower(snake_forward_kernel::SnakeForwardKernel::<Rt>::new(
        L::settings_1d(),
        c.clone(),
        a(),
        a(),
        a(),
        a(),
        (),
        (),
    ));
    l.lower(snake_backward_kernel::SnakeBackwardKernel::<Rt>::new(
        L::settings_1d(),
        c,
        a(),
        a(),
        a(),
        a(),
        a(),
        a(),
        a(),
        (),
        (),
    ));
}
