//! The image and geometry steps around the three networks of the PP-OCR pipeline of
//! `rapidocr-onnxruntime` 1.4.4, reproduced operation for operation so that boxes and crops
//! come out identical to the package's (OpenCV 5.1, pyclipper 1.4 / Clipper 6.4.2, shapely 2.2 /
//! GEOS 3.14, numpy 2.4 on x86-64):
//!
//! * [`resize_linear`]: `cv2.resize(img, (w, h))`, OpenCV's fixed-point bilinear for `uint8`.
//! * [`warp_crop`]: `cv2.getPerspectiveTransform` + `cv2.warpPerspective(INTER_CUBIC,
//!   BORDER_REPLICATE)` as OpenCV 5 runs them; [`rotate90_ccw`] and [`rotate180`].
//! * [`db_boxes`]: `DBPostProcess` (threshold, dilation, `findContours`, `minAreaRect`,
//!   `fillPoly` scores, pyclipper unclip) followed by `TextDetector.filter_tag_det_res`.
//! * [`sort_boxes`], [`crop_size`] and [`ctc_greedy`]: the package's reading order, crop size
//!   and greedy CTC decoding.
//!
//! Floating-point steps use the reference's precision and operation order (`f32` where OpenCV
//! or numpy compute in `float32`, fused multiply-adds where OpenCV's SIMD kernels use them),
//! integer steps the reference's fixed-point formats and rounding.

use std::cmp::Ordering;
use std::f64::consts::PI;

/// An 8-bit BGR image, rows top to bottom, pixels interleaved B, G, R.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bgr {
    /// Pixels per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// `height * width * 3` bytes, row-major, B, G, R per pixel.
    pub data: Vec<u8>,
}

/// A quadrilateral's corners (x, y) in pixels.
pub type Quad = [[f32; 2]; 4];

impl Bgr {
    /// An image of `width` x `height` pixels from its `width * height * 3` bytes (row-major,
    /// B, G, R per pixel); `None` when `data` has another length.
    pub fn new(width: usize, height: usize, data: Vec<u8>) -> Option<Bgr> {
        let len = width.checked_mul(height)?.checked_mul(3)?;
        (data.len() == len).then_some(Bgr {
            width,
            height,
            data,
        })
    }

    /// Asserts the layout contract of `data` (which [`Bgr::new`] checks).
    fn assert_valid(&self) {
        let len = self
            .width
            .checked_mul(self.height)
            .and_then(|n| n.checked_mul(3));
        assert!(
            len == Some(self.data.len()),
            "Bgr: {} bytes for {} x {} pixels (width * height * 3 expected)",
            self.data.len(),
            self.width,
            self.height
        );
    }

    /// A black image.
    fn black(width: usize, height: usize) -> Bgr {
        Bgr {
            width,
            height,
            data: vec![0; width * height * 3],
        }
    }

    /// Channel `c` of pixel (`x`, `y`).
    fn at(&self, x: usize, y: usize, c: usize) -> u8 {
        self.data[(y * self.width + x) * 3 + c]
    }
}

// ---------------------------------------------------------------------------------------------
// Bilinear resize.

/// OpenCV's `INTER_RESIZE_COEF_SCALE`: bilinear weights are 11-bit fixed point.
const RESIZE_ONE: f32 = 2048.0;

/// The two source taps of one output column or row and their fixed-point weights.
#[derive(Clone, Copy)]
struct Taps {
    first: usize,
    second: usize,
    w0: i32,
    w1: i32,
}

/// OpenCV's bilinear taps for `dst` outputs over `src` inputs: the source position
/// `(d + 0.5) * scale - 0.5` in `float`, its floor and fraction, the fraction rounded to 11 bits
/// (half to even). Columns clamp the position to the image (`clamp_fraction`); rows keep the
/// fraction and only clamp the row indices.
fn linear_taps(src: usize, dst: usize, clamp_fraction: bool) -> Vec<Taps> {
    let scale = 1.0 / (dst as f64 / src as f64);
    let last = src as i64 - 1;
    (0..dst)
        .map(|d| {
            let pos = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let floor = pos.floor();
            let mut s = floor as i64;
            let mut f = pos - floor;
            if clamp_fraction && s < 0 {
                f = 0.0;
                s = 0;
            }
            if clamp_fraction && s >= last {
                f = 0.0;
                s = last;
            }
            Taps {
                first: s.clamp(0, last) as usize,
                second: (s + 1).clamp(0, last) as usize,
                w0: ((1.0 - f) * RESIZE_ONE).round_ties_even() as i32,
                w1: (f * RESIZE_ONE).round_ties_even() as i32,
            }
        })
        .collect()
}

/// `cv2.resize(img, (width, height))` with `INTER_LINEAR` on `uint8`, bit-exact: half-pixel
/// centres, 11-bit weights, a horizontal pass kept in 32-bit integers and OpenCV's vertical
/// rounding `((((S0 >> 4) * b0) >> 16) + (((S1 >> 4) * b1) >> 16) + 2) >> 2` (the same formula
/// serves the exact 2x downscale OpenCV routes to `INTER_AREA`). An empty source gives a black
/// image of the requested size. Panics when `img.data` does not hold `width * height * 3`
/// bytes.
pub fn resize_linear(img: &Bgr, width: usize, height: usize) -> Bgr {
    img.assert_valid();
    if img.width == 0 || img.height == 0 || width == 0 || height == 0 {
        return Bgr::black(width, height);
    }
    if (img.width, img.height) == (width, height) {
        return img.clone();
    }
    let xs = linear_taps(img.width, width, true);
    let ys = linear_taps(img.height, height, false);
    let row_len = width * 3;
    let mut rows = vec![0i32; img.height * row_len];
    for (y, row) in rows.chunks_exact_mut(row_len).enumerate() {
        for (x, t) in xs.iter().enumerate() {
            for c in 0..3 {
                let p0 = i32::from(img.at(t.first, y, c));
                let p1 = i32::from(img.at(t.second, y, c));
                row[x * 3 + c] = p0 * t.w0 + p1 * t.w1;
            }
        }
    }
    let mut data = Vec::with_capacity(height * row_len);
    for t in &ys {
        let r0 = &rows[t.first * row_len..][..row_len];
        let r1 = &rows[t.second * row_len..][..row_len];
        data.extend(r0.iter().zip(r1).map(|(&s0, &s1)| {
            let v = (((s0 >> 4) * t.w0) >> 16) + (((s1 >> 4) * t.w1) >> 16);
            ((v + 2) >> 2).clamp(0, 255) as u8
        }));
    }
    Bgr {
        width,
        height,
        data,
    }
}

// ---------------------------------------------------------------------------------------------
// Perspective crop.

/// `cv2.getPerspectiveTransform(quad, [[0, 0], [w, 0], [w, h], [0, h]])`: the eight equations
/// (products of `float` coordinates formed in `float`) solved by OpenCV's LU; `None` when
/// singular.
fn perspective_transform(quad: &Quad, w: f32, h: f32) -> Option<[f64; 9]> {
    let dst = [[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]];
    let mut a = [[0.0f64; 8]; 8];
    let mut b = [0.0f64; 8];
    for (i, (&[sx, sy], &[dx, dy])) in quad.iter().zip(&dst).enumerate() {
        a[i][0] = f64::from(sx);
        a[i][1] = f64::from(sy);
        a[i][2] = 1.0;
        a[i][6] = f64::from(-sx * dx);
        a[i][7] = f64::from(-sy * dx);
        a[i + 4][3] = f64::from(sx);
        a[i + 4][4] = f64::from(sy);
        a[i + 4][5] = 1.0;
        a[i + 4][6] = f64::from(-sx * dy);
        a[i + 4][7] = f64::from(-sy * dy);
        b[i] = f64::from(dx);
        b[i + 4] = f64::from(dy);
    }
    let x = lu_solve(a, b)?;
    Some([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], 1.0])
}

/// OpenCV's `LUImpl` on an 8x8 system: partial pivoting, pivots below `100 * DBL_EPSILON`
/// count as singular.
fn lu_solve(mut a: [[f64; 8]; 8], mut b: [f64; 8]) -> Option<[f64; 8]> {
    const N: usize = 8;
    for i in 0..N {
        let mut k = i;
        for j in i + 1..N {
            if a[j][i].abs() > a[k][i].abs() {
                k = j;
            }
        }
        if a[k][i].abs() < f64::EPSILON * 100.0 {
            return None;
        }
        a.swap(i, k);
        b.swap(i, k);
        let d = -1.0 / a[i][i];
        let pivot = a[i];
        for j in i + 1..N {
            let alpha = a[j][i] * d;
            for (v, &p) in a[j][i + 1..].iter_mut().zip(&pivot[i + 1..]) {
                *v += alpha * p;
            }
            b[j] += alpha * b[i];
        }
    }
    for i in (0..N).rev() {
        let mut s = b[i];
        for k in i + 1..N {
            s -= a[i][k] * b[k];
        }
        b[i] = s / a[i][i];
    }
    Some(b)
}

/// `cv::invert` of a 3x3 `double` matrix (the cofactor formula `DECOMP_LU` uses for 3x3);
/// `None` when the determinant is zero.
fn invert3(m: &[f64; 9]) -> Option<[f64; 9]> {
    let s = |r: usize, c: usize| m[r * 3 + c];
    let det = s(0, 0) * (s(1, 1) * s(2, 2) - s(1, 2) * s(2, 1))
        - s(0, 1) * (s(1, 0) * s(2, 2) - s(1, 2) * s(2, 0))
        + s(0, 2) * (s(1, 0) * s(2, 1) - s(1, 1) * s(2, 0));
    if det == 0.0 {
        return None;
    }
    let d = 1.0 / det;
    Some([
        (s(1, 1) * s(2, 2) - s(1, 2) * s(2, 1)) * d,
        (s(0, 2) * s(2, 1) - s(0, 1) * s(2, 2)) * d,
        (s(0, 1) * s(1, 2) - s(0, 2) * s(1, 1)) * d,
        (s(1, 2) * s(2, 0) - s(1, 0) * s(2, 2)) * d,
        (s(0, 0) * s(2, 2) - s(0, 2) * s(2, 0)) * d,
        (s(0, 2) * s(1, 0) - s(0, 0) * s(1, 2)) * d,
        (s(1, 0) * s(2, 1) - s(1, 1) * s(2, 0)) * d,
        (s(0, 1) * s(2, 0) - s(0, 0) * s(2, 1)) * d,
        (s(0, 0) * s(1, 1) - s(0, 1) * s(1, 0)) * d,
    ])
}

/// OpenCV 5's bicubic weights (a = -0.75) for the fraction `t`, in `float` with its two fused
/// multiply-adds.
fn cubic_weights(t: f32) -> [f32; 4] {
    const A: f32 = -0.75;
    let t2 = t * t;
    let u = 1.0 - t;
    let w0 = A * (t * (u * u));
    let w3 = A * (t2 * u);
    let w1 = t2.mul_add((A + 2.0).mul_add(t, -(A + 3.0)), 1.0);
    let w2 = ((1.0 - w0) - w1) - w3;
    [w0, w1, w2, w3]
}

/// The four replicated-border taps around the integer part of a source coordinate.
fn cubic_taps(i: i64, len: usize) -> [usize; 4] {
    let last = len as i64 - 1;
    [-1, 0, 1, 2].map(|d| (i + d).clamp(0, last) as usize)
}

/// A source coordinate clamped as OpenCV 5's warp does (to [-size, 2 size], size at least 16).
fn clamp_coord(v: f32, size: usize) -> f32 {
    let big = size.max(16) as f32;
    if v < -big {
        -big
    } else if v > big * 2.0 {
        big * 2.0
    } else {
        v
    }
}

/// `cv2.getPerspectiveTransform(quad, [[0, 0], [width, 0], [width, height], [0, height]])`
/// then `cv2.warpPerspective(img, M, (width, height), flags=INTER_CUBIC,
/// borderMode=BORDER_REPLICATE)` as OpenCV 5.1 computes them, bit-exact on `uint8`: the matrix
/// in `double`, inverted, cast to `float`; per pixel the source position
/// `(mx + m0 x) / (mz + m6 x)` in `double` from `float` row terms, cast to `float`; bicubic
/// weights and the 4x4 sum in `float` with fused multiply-adds, rounded half to even.
/// `quad` lists the corners that map to the crop's top-left, top-right, bottom-right and
/// bottom-left. A degenerate quad or an empty source gives a black image. Panics when
/// `img.data` does not hold `width * height * 3` bytes.
pub fn warp_crop(img: &Bgr, quad: &Quad, width: usize, height: usize) -> Bgr {
    img.assert_valid();
    let mut out = Bgr::black(width, height);
    if width == 0 || height == 0 || img.width == 0 || img.height == 0 {
        return out;
    }
    let Some(m) = perspective_transform(quad, width as f32, height as f32) else {
        return out;
    };
    let Some(inv) = invert3(&m) else {
        return out;
    };
    let m = inv.map(|v| v as f32);
    for y in 0..height {
        let fy = y as f32;
        let row_x = f64::from(fy * m[1] + m[2]);
        let row_y = f64::from(fy * m[4] + m[5]);
        let row_z = f64::from(fy * m[7] + m[8]);
        for x in 0..width {
            let xd = x as f64;
            let inv_z = 1.0 / (row_z + f64::from(m[6]) * xd);
            let sx = ((row_x + f64::from(m[0]) * xd) * inv_z) as f32;
            let sy = ((row_y + f64::from(m[3]) * xd) * inv_z) as f32;
            let sx = clamp_coord(sx, img.width);
            let sy = clamp_coord(sy, img.height);
            let (fx, fy) = (sx.floor(), sy.floor());
            let wx = cubic_weights(sx - fx);
            let wy = cubic_weights(sy - fy);
            let cols = cubic_taps(fx as i64, img.width);
            let rows = cubic_taps(fy as i64, img.height);
            for c in 0..3 {
                let mut acc = 0.0f32;
                for (r, (&row, &w)) in rows.iter().zip(&wy).enumerate() {
                    let p = |k: usize| f32::from(img.at(cols[k], row, c));
                    let mut s = p(0) * wx[0];
                    s = p(1).mul_add(wx[1], s);
                    s = p(2).mul_add(wx[2], s);
                    s = p(3).mul_add(wx[3], s);
                    acc = if r == 0 { s * w } else { s.mul_add(w, acc) };
                }
                out.data[(y * width + x) * 3 + c] = acc.round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

/// `np.rot90(img)`: a quarter turn counter-clockwise (the result is `height` wide). Panics
/// when `img.data` does not hold `width * height * 3` bytes.
pub fn rotate90_ccw(img: &Bgr) -> Bgr {
    img.assert_valid();
    let (w, h) = (img.width, img.height);
    let mut data = Vec::with_capacity(img.data.len());
    for i in 0..w {
        for j in 0..h {
            let s = (j * w + (w - 1 - i)) * 3;
            data.extend_from_slice(&img.data[s..s + 3]);
        }
    }
    Bgr {
        width: h,
        height: w,
        data,
    }
}

/// `cv2.rotate(img, cv2.ROTATE_180)`. Panics when `img.data` does not hold
/// `width * height * 3` bytes.
pub fn rotate180(img: &Bgr) -> Bgr {
    img.assert_valid();
    let mut data = Vec::with_capacity(img.data.len());
    for px in img.data.chunks_exact(3).rev() {
        data.extend_from_slice(px);
    }
    Bgr {
        width: img.width,
        height: img.height,
        data,
    }
}

// ---------------------------------------------------------------------------------------------
// DB post-processing.

/// `DBPostProcess`'s settings (their defaults are RapidOCR's configuration). The thresholds
/// the package keeps as Python floats (`box_thresh`, `unclip_ratio`) are `f64` so that 1.6 is
/// the same number; `thresh` is compared with the `float32` map as a `float32`.
#[derive(Clone, Debug, PartialEq)]
pub struct DbParams {
    /// A map pixel is text when its probability is above this.
    pub thresh: f32,
    /// A box is kept when the mean probability inside it is at least this.
    pub box_thresh: f64,
    /// At most this many contours are looked at, in OpenCV's order.
    pub max_candidates: usize,
    /// A box grows by `area * unclip_ratio / perimeter` on every side.
    pub unclip_ratio: f64,
    /// A box's shorter side must reach this (this + 2 after growing), in map pixels.
    pub min_size: f32,
}

impl Default for DbParams {
    /// rapidocr-onnxruntime 1.4.4's defaults: 0.3, 0.5, 1000, 1.6, 3.
    fn default() -> DbParams {
        DbParams {
            thresh: 0.3,
            box_thresh: 0.5,
            max_candidates: 1000,
            unclip_ratio: 1.6,
            min_size: 3.0,
        }
    }
}

/// DB post-processing of a detector probability map `prob` (row-major, `map_w` x `map_h`) into
/// text boxes in the coordinates of a `dest_w` x `dest_h` image (the image the detector input
/// was resized from), exactly as rapidocr 1.4.4's `DBPostProcess(thresh 0.3, box_thresh 0.5,
/// max_candidates 1000, unclip_ratio 1.6, use_dilation True, score_mode "fast")` followed by
/// `TextDetector.filter_tag_det_res`: threshold, 2x2 dilation, `findContours(RETR_LIST,
/// CHAIN_APPROX_SIMPLE)` in OpenCV's order, `minAreaRect` + `boxPoints`, the mean map value
/// under the `fillPoly` of the box, unclip with pyclipper (round joins, arc tolerance 0.25),
/// `minAreaRect` again, rescale (`np.round` in `float32`), corners ordered top-left, top-right,
/// bottom-right, bottom-left, clipped to the image, boxes with a side of at most 3 pixels
/// dropped. Returns the boxes in the package's order (not yet [`sort_boxes`]ed); none when
/// `prob.len() != map_w * map_h` or a size is zero.
pub fn db_boxes(
    prob: &[f32],
    map_w: usize,
    map_h: usize,
    dest_w: usize,
    dest_h: usize,
    params: &DbParams,
) -> Vec<Quad> {
    if map_w == 0 || map_h == 0 || dest_w == 0 || dest_h == 0 {
        return Vec::new();
    }
    if map_w.checked_mul(map_h) != Some(prob.len()) {
        return Vec::new();
    }
    let bitmap = binarize_dilate(prob, map_w, map_h, params.thresh);
    let contours = find_contours(&bitmap, map_w, map_h);
    let mut boxes = Vec::new();
    for contour in contours.iter().take(params.max_candidates) {
        let (quad, short) = mini_box(contour);
        if short < params.min_size {
            continue;
        }
        if params.box_thresh > box_score_fast(prob, map_w, map_h, &quad) {
            continue;
        }
        let grown = unclip(&quad, params.unclip_ratio);
        if grown.is_empty() {
            continue;
        }
        let (quad, short) = mini_box(&grown);
        if short < params.min_size + 2.0 {
            continue;
        }
        let scale = |v: f32, map: usize, dest: usize| {
            (v / map as f32 * dest as f32)
                .round_ties_even()
                .clamp(0.0, dest as f32)
        };
        let corners = quad.map(|[x, y]| [scale(x, map_w, dest_w), scale(y, map_h, dest_h)]);
        let ordered = order_points_clockwise(&corners);
        let clipped = ordered.map(|[x, y]| {
            [
                x.clamp(0.0, (dest_w - 1) as f32).trunc(),
                y.clamp(0.0, (dest_h - 1) as f32).trunc(),
            ]
        });
        if norm32(clipped[0], clipped[1]) as i64 <= 3 || norm32(clipped[0], clipped[3]) as i64 <= 3
        {
            continue;
        }
        boxes.push(clipped);
    }
    boxes
}

/// `map > thresh` as 0/1 bytes, then `cv2.dilate` with a 2x2 kernel (anchor at its bottom-right
/// element): a pixel is set when it or its left, upper or upper-left neighbour is.
fn binarize_dilate(prob: &[f32], w: usize, h: usize, thresh: f32) -> Vec<u8> {
    let bits: Vec<u8> = prob.iter().map(|&p| u8::from(p > thresh)).collect();
    let set = |x: usize, y: usize| bits[y * w + x] != 0;
    let mut out = vec![0u8; w * h];
    for y in 0..h {
        for x in 0..w {
            let left = x > 0 && (set(x - 1, y) || (y > 0 && set(x - 1, y - 1)));
            out[y * w + x] = u8::from(set(x, y) || (y > 0 && set(x, y - 1)) || left);
        }
    }
    out
}

/// Chain codes (dx, dy): right, up-right, up, up-left, left, down-left, down, down-right.
const CHAIN: [(isize, isize); 8] = [
    (1, 0),
    (1, -1),
    (0, -1),
    (-1, -1),
    (-1, 0),
    (-1, 1),
    (0, 1),
    (1, 1),
];

/// The mark of a traced border pixel (negated when the pixel right of it is background).
const BORDER_MARK: i8 = 2;

/// `cv2.findContours(bitmap, RETR_LIST, CHAIN_APPROX_SIMPLE)`: Suzuki-Abe border following
/// with 8-connectivity on the image framed by a zero border, outer borders and holes, in
/// OpenCV's order (the reverse of discovery), each compressed to the ends of its horizontal,
/// vertical and diagonal runs.
fn find_contours(bitmap: &[u8], w: usize, h: usize) -> Vec<Vec<[i64; 2]>> {
    let pw = w + 2;
    let mut img = vec![0i8; pw * (h + 2)];
    for y in 0..h {
        for x in 0..w {
            img[(y + 1) * pw + x + 1] = i8::from(bitmap[y * w + x] != 0);
        }
    }
    let mut found = Vec::new();
    for y in 1..=h {
        let mut prev = 0i8;
        for x in 1..=w {
            let at = y * pw + x;
            let p = img[at];
            if p == prev {
                continue;
            }
            let outer = prev == 0 && p == 1;
            let hole = !outer && p == 0 && prev >= 1;
            if outer || hole {
                let start = if hole { at - 1 } else { at };
                found.push(trace_border(&mut img, pw, start, hole));
                prev = img[at];
            } else {
                prev = p;
            }
        }
    }
    found.reverse();
    found
}

/// OpenCV's `icvFetchContour` from `start` (an index into the framed image `img`, `pw` wide),
/// marking the border as it goes; returns the points where the direction changes.
fn trace_border(img: &mut [i8], pw: usize, start: usize, hole: bool) -> Vec<[i64; 2]> {
    let delta = |k: usize| CHAIN[k & 7].1 * pw as isize + CHAIN[k & 7].0;
    let point = |i: usize| [(i % pw) as i64 - 1, (i / pw) as i64 - 1];
    let i0 = start;
    let s_end = if hole { 0 } else { 4 };
    let mut s = s_end;
    let mut i1;
    loop {
        s = (s + 7) & 7;
        i1 = i0.wrapping_add_signed(delta(s));
        if img[i1] != 0 || s == s_end {
            break;
        }
    }
    if s == s_end {
        img[i0] = -BORDER_MARK;
        return vec![point(i0)];
    }
    let mut points = Vec::new();
    let mut i3 = i0;
    let mut prev_s = s ^ 4;
    loop {
        let s_end = s;
        let mut k = s;
        let mut i4 = i3;
        while k < 15 {
            k += 1;
            i4 = i3.wrapping_add_signed(delta(k));
            if img[i4] != 0 {
                break;
            }
        }
        s = k & 7;
        if s.wrapping_sub(1) < s_end {
            img[i3] = -BORDER_MARK;
        } else if img[i3] == 1 {
            img[i3] = BORDER_MARK;
        }
        if s != prev_s {
            points.push(point(i3));
            prev_s = s;
        }
        if i4 == i0 && i3 == i1 {
            break;
        }
        i3 = i4;
        s = (s + 4) & 7;
    }
    points
}

/// `CV_SIGN`.
fn sign(v: i64) -> i64 {
    i64::from(v > 0) - i64::from(v < 0)
}

/// OpenCV's `Sklansky_` over the sorted points `order` from position `start` to `end`; returns
/// the kept positions.
fn sklansky(
    pts: &[[i64; 2]],
    order: &[usize],
    start: usize,
    end: usize,
    nsign: i64,
    sign2: i64,
) -> Vec<usize> {
    let at = |k: isize| pts[order[k as usize]];
    let (start, end) = (start as isize, end as isize);
    if start == end || at(start) == at(end) {
        return vec![start as usize];
    }
    let incr = if end > start { 1 } else { -1 };
    let (mut pprev, mut pcur, mut pnext) = (start, start + incr, start + 2 * incr);
    let mut stack = vec![pprev, pcur, pnext];
    let stop = end + incr;
    while pnext != stop {
        let (cur, next) = (at(pcur), at(pnext));
        if cur == next {
            pnext += incr;
            *stack.last_mut().expect("the stack holds three entries") = pnext;
            continue;
        }
        let by = next[1] - cur[1];
        if sign(by) != nsign {
            let p = at(pprev);
            let (ax, ay, bx) = (cur[0] - p[0], cur[1] - p[1], next[0] - cur[0]);
            if sign(ay * bx - ax * by) == sign2 && (ax != 0 || ay != 0) {
                pprev = pcur;
                pcur = pnext;
                pnext += incr;
                stack.push(pnext);
            } else if pprev == start {
                pcur = pnext;
                stack[1] = pcur;
                pnext += incr;
                stack[2] = pnext;
            } else {
                let len = stack.len();
                stack[len - 2] = pnext;
                pcur = pprev;
                pprev = stack[len - 4];
                stack.pop();
            }
        } else {
            pnext += incr;
            *stack.last_mut().expect("the stack holds three entries") = pnext;
        }
    }
    stack.pop();
    stack.into_iter().map(|k| k as usize).collect()
}

/// `cv::convexHull(points, clockwise = false)` on integer points: Sklansky's scan over the
/// points sorted by (x, y, index), then OpenCV's cyclic shift towards an ascending or
/// descending run of input indices (which decides the first vertex).
fn convex_hull(pts: &[[i64; 2]]) -> Vec<[i64; 2]> {
    let n = pts.len();
    if n == 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&i| (pts[i][0], pts[i][1], i));
    let at = |k: usize| pts[order[k]];
    let (mut miny, mut maxy) = (0, 0);
    for k in 1..n {
        let y = at(k)[1];
        if at(miny)[1] > y {
            miny = k;
        }
        if at(maxy)[1] < y {
            maxy = k;
        }
    }
    if at(0) == at(n - 1) {
        return vec![at(0)];
    }
    // Upper half; counter-clockwise output swaps the two chains.
    let tr = sklansky(pts, &order, 0, maxy, -1, 1);
    let tl = sklansky(pts, &order, n - 1, maxy, -1, -1);
    let mut hull: Vec<usize> = tl[..tl.len() - 1].iter().map(|&k| order[k]).collect();
    hull.extend(tr[1..].iter().rev().map(|&k| order[k]));
    let stop = if tr.len() > 2 {
        Some(tr[1])
    } else if tl.len() > 2 {
        Some(tl[tl.len() - 2])
    } else {
        None
    };
    // Lower half.
    let mut bl = sklansky(pts, &order, 0, miny, 1, -1);
    let mut br = sklansky(pts, &order, n - 1, miny, 1, 1);
    if let Some(stop) = stop {
        let check = if bl.len() > 2 {
            Some(bl[1])
        } else if bl.len() + br.len() > 2 {
            Some(br[2 - bl.len()])
        } else {
            None
        };
        if check.is_some_and(|c| c == stop || at(c) == at(stop)) {
            // All points on one line: the lower half mirrors the upper one.
            bl.truncate(2);
            br.truncate(2);
        }
    }
    hull.extend(bl[..bl.len() - 1].iter().map(|&k| order[k]));
    hull.extend(br[1..].iter().rev().map(|&k| order[k]));
    shift_to_monotonic(&mut hull);
    hull.into_iter().map(|i| pts[i]).collect()
}

/// OpenCV's cyclic shift of the hull's input indices into an ascending or descending sequence,
/// when one exists.
fn shift_to_monotonic(hull: &mut Vec<usize>) {
    let n = hull.len();
    if n < 3 {
        return;
    }
    let (mut min_i, mut max_i, mut lt) = (0, 0, 0);
    for i in 1..n {
        let idx = hull[i];
        lt += usize::from(hull[i - 1] < idx);
        if lt > 1 && lt + 2 <= i {
            break;
        }
        if idx < hull[min_i] {
            min_i = i;
        }
        if idx > hull[max_i] {
            max_i = i;
        }
    }
    let dist = min_i.abs_diff(max_i);
    if !((dist == 1 || dist == n - 1) && (lt <= 1 || lt + 2 >= n)) {
        return;
    }
    let ascending = (max_i + 1) % n == min_i;
    let i0 = if ascending { min_i } else { max_i };
    if i0 == 0 {
        return;
    }
    let mut shifted = Vec::with_capacity(n);
    let mut j = i0;
    for i in 0..n {
        let cur = hull[j];
        shifted.push(cur);
        let next = (j + 1) % n;
        if i < n - 1 && ascending != (cur < hull[next]) {
            return;
        }
        j = next;
    }
    *hull = shifted;
}

/// A `cv::RotatedRect` as OpenCV 5 reports it (angle in degrees).
#[derive(Clone, Copy, Debug, PartialEq)]
struct RotRect {
    cx: f32,
    cy: f32,
    width: f32,
    height: f32,
    angle: f32,
}

/// `v1` rotated a quarter clockwise points away from `v2` (OpenCV's `firstVecIsRight`).
fn first_vec_is_right(v1: [f32; 2], v2: [f32; 2]) -> bool {
    v1[1] * v2[0] + -v1[0] * v2[1] < 0.0
}

/// OpenCV 5's `rotatingCalipers(CALIPERS_MINAREARECT)` on a counter-clockwise hull in `float`:
/// returns the corner, the width vector and the height vector of the smallest rectangle.
fn rotating_calipers(p: &[[f32; 2]]) -> [[f32; 2]; 3] {
    let n = p.len();
    let mut vect = Vec::with_capacity(n);
    let mut inv_len = Vec::with_capacity(n);
    let (mut left, mut bottom, mut right, mut top) = (0, 0, 0, 0);
    let mut pt0 = p[0];
    let (mut left_x, mut right_x, mut top_y, mut bottom_y) = (pt0[0], pt0[0], pt0[1], pt0[1]);
    for i in 0..n {
        if pt0[0] < left_x {
            left_x = pt0[0];
            left = i;
        }
        if pt0[0] > right_x {
            right_x = pt0[0];
            right = i;
        }
        if pt0[1] > top_y {
            top_y = pt0[1];
            top = i;
        }
        if pt0[1] < bottom_y {
            bottom_y = pt0[1];
            bottom = i;
        }
        let pt = p[(i + 1) % n];
        let (dx, dy) = (pt[0] - pt0[0], pt[1] - pt0[1]);
        let (dxd, dyd) = (f64::from(dx), f64::from(dy));
        vect.push([dx, dy]);
        inv_len.push((1.0 / (dxd * dxd + dyd * dyd).sqrt()) as f32);
        pt0 = pt;
    }
    let mut seq = [bottom, right, top, left];
    let mut min_area = f32::MAX;
    let mut best = (0, 0, 0.0f32, 0.0f32, 0.0f32, 0.0f32);
    for _ in 0..n {
        let [v0, v1, v2, v3] = seq.map(|k| vect[k]);
        let rot = [v0, [v1[1], -v1[0]], [-v2[0], -v2[1]], [-v3[1], v3[0]]];
        let mut main = 0;
        for (i, &r) in rot.iter().enumerate().skip(1) {
            if first_vec_is_right(r, rot[main]) {
                main = i;
            }
        }
        let k = seq[main];
        let (lx, ly) = (vect[k][0] * inv_len[k], vect[k][1] * inv_len[k]);
        let (base_a, base_b) = match main {
            0 => (lx, ly),
            1 => (ly, -lx),
            2 => (-lx, -ly),
            _ => (-ly, lx),
        };
        seq[main] = (seq[main] + 1) % n;
        let (dx, dy) = (p[seq[1]][0] - p[seq[3]][0], p[seq[1]][1] - p[seq[3]][1]);
        let width = dx * base_a + dy * base_b;
        let (dx, dy) = (p[seq[2]][0] - p[seq[0]][0], p[seq[2]][1] - p[seq[0]][1]);
        let height = -dx * base_b + dy * base_a;
        let area = width * height;
        if area <= min_area {
            min_area = area;
            best = (seq[3], seq[0], base_a, width, base_b, height);
        }
    }
    let (li, bi, a1, width, b1, height) = best;
    let (a2, b2) = (-b1, a1);
    let (l, b) = (p[li], p[bi]);
    let c1 = a1 * l[0] + l[1] * b1;
    let c2 = a2 * b[0] + b[1] * b2;
    let idet = 1.0 / (a1 * b2 - a2 * b1);
    let px = (c1 * b2 - c2 * b1) * idet;
    let py = (a1 * c2 - a2 * c1) * idet;
    [
        [px, py],
        [a1 * width, b1 * width],
        [a2 * height, b2 * height],
    ]
}

/// `cv2.minAreaRect` on integer points as OpenCV 5.1 computes it.
fn min_area_rect(points: &[[i64; 2]]) -> RotRect {
    let hull: Vec<[f32; 2]> = convex_hull(points)
        .iter()
        .map(|&[x, y]| [x as f32, y as f32])
        .collect();
    let len = |v: [f32; 2]| {
        let (x, y) = (f64::from(v[0]), f64::from(v[1]));
        (x * x + y * y).sqrt() as f32
    };
    let mut angle = -PI / 2.0;
    let mut r = RotRect {
        cx: 0.0,
        cy: 0.0,
        width: 0.0,
        height: 0.0,
        angle: 0.0,
    };
    match hull.len() {
        0 => {}
        1 => [r.cx, r.cy] = hull[0],
        2 => {
            let (p, q) = (hull[0], hull[1]);
            r.cx = (p[0] + q[0]) * 0.5;
            r.cy = (p[1] + q[1]) * 0.5;
            let (dx, dy) = (p[0] - q[0], p[1] - q[1]);
            let d = len([dx, dy]);
            (r.width, r.height) = (0.0, d);
            if dx == 0.0 {
                (r.width, r.height) = (d, 0.0);
            } else if dy < 0.0 {
                angle = f64::from(dy).atan2(f64::from(dx));
                (r.width, r.height) = (d, 0.0);
            } else if dy > 0.0 {
                angle = -f64::from(dx).atan2(f64::from(dy));
            }
        }
        _ => {
            let [corner, v1, v2] = rotating_calipers(&hull);
            r.cx = corner[0] + (v1[0] + v2[0]) * 0.5;
            r.cy = corner[1] + (v1[1] + v2[1]) * 0.5;
            (r.width, r.height) = (len(v2), len(v1));
            if v1[0] == 0.0 && v1[1] > 0.0 {
                (r.width, r.height) = (r.height, r.width);
            } else {
                angle = -f64::from(v1[0]).atan2(f64::from(v1[1]));
            }
        }
    }
    r.angle = (angle * 180.0 / PI) as f32;
    r
}

/// `cv2.boxPoints` (`RotatedRect::points` of OpenCV 5).
fn box_points(r: &RotRect) -> Quad {
    let a0 = f64::from(r.angle) * PI / 180.0;
    let b = a0.cos() as f32 * 0.5;
    let a = a0.sin() as f32 * 0.5;
    let (ah, aw, bh, bw) = (a * r.height, a * r.width, b * r.height, b * r.width);
    [
        [(r.cx - ah) - bw, (r.cy + bh) - aw],
        [(r.cx + ah) - bw, (r.cy - bh) - aw],
        [(r.cx + ah) + bw, (r.cy - bh) + aw],
        [(r.cx - ah) + bw, (r.cy + bh) + aw],
    ]
}

/// `DBPostProcess.get_mini_boxes`: the minimum-area rectangle's corners as top-left,
/// top-right, bottom-right, bottom-left (by the package's rule) and its shorter side.
fn mini_box(points: &[[i64; 2]]) -> (Quad, f32) {
    let rect = min_area_rect(points);
    let mut p = box_points(&rect);
    p.sort_by(|a, b| a[0].partial_cmp(&b[0]).unwrap_or(Ordering::Equal));
    let (i1, i4) = if p[1][1] > p[0][1] { (0, 1) } else { (1, 0) };
    let (i2, i3) = if p[3][1] > p[2][1] { (2, 3) } else { (3, 2) };
    ([p[i1], p[i2], p[i3], p[i4]], rect.width.min(rect.height))
}

/// `DBPostProcess.box_score_fast`: the mean of the map under `cv2.fillPoly` of the box (its
/// corners shifted to the bounding window and truncated to integers), as `cv2.mean` sums it.
fn box_score_fast(prob: &[f32], w: usize, h: usize, quad: &Quad) -> f64 {
    let bound =
        |f: fn(f32, f32) -> f32, axis: usize| quad.iter().map(|p| p[axis]).fold(quad[0][axis], f);
    let window = |v: f32, len: usize| (v as i64).clamp(0, len as i64 - 1);
    let xmin = window(bound(f32::min, 0).floor(), w);
    let xmax = window(bound(f32::max, 0).ceil(), w);
    let ymin = window(bound(f32::min, 1).floor(), h);
    let ymax = window(bound(f32::max, 1).ceil(), h);
    let (mw, mh) = ((xmax - xmin + 1) as usize, (ymax - ymin + 1) as usize);
    let corners = quad.map(|[x, y]| [(x - xmin as f32) as i64, (y - ymin as f32) as i64]);
    let mut mask = vec![0u8; mw * mh];
    fill_poly(&mut mask, mw, mh, &corners);
    let (mut sum, mut count) = (0.0f64, 0usize);
    for (y, row) in mask.chunks_exact(mw).enumerate() {
        let line = &prob[(ymin as usize + y) * w + xmin as usize..][..mw];
        for (&m, &p) in row.iter().zip(line) {
            if m != 0 {
                sum += f64::from(p);
                count += 1;
            }
        }
    }
    if count == 0 {
        0.0
    } else {
        sum * (1.0 / count as f64)
    }
}

/// OpenCV's drawing fixed point: 16 fractional bits.
const XY_SHIFT: u32 = 16;

/// An edge of `cv::fillPoly`'s scanline filler.
#[derive(Clone, Copy)]
struct PolyEdge {
    y0: i64,
    y1: i64,
    x: i64,
    dx: i64,
    next: usize,
}

/// The end of the active-edge list.
const NIL: usize = usize::MAX;

/// `cv::clipLine` to a `w` x `h` image: moves the ends onto the image (in place) and reports
/// whether any of the segment is on it.
fn clip_line(w: i64, h: i64, p1: &mut [i64; 2], p2: &mut [i64; 2]) -> bool {
    let (right, bottom) = (w - 1, h - 1);
    let code = |p: &[i64; 2]| {
        i32::from(p[0] < 0)
            + i32::from(p[0] > right) * 2
            + i32::from(p[1] < 0) * 4
            + i32::from(p[1] > bottom) * 8
    };
    let step = |num: i64, d1: i64, d2: i64| (num as f64 * d1 as f64 / d2 as f64) as i64;
    let (mut c1, mut c2) = (code(p1), code(p2));
    if c1 & c2 == 0 && c1 | c2 != 0 {
        if c1 & 12 != 0 {
            let a = if c1 < 8 { 0 } else { bottom };
            p1[0] += step(a - p1[1], p2[0] - p1[0], p2[1] - p1[1]);
            p1[1] = a;
            c1 = i32::from(p1[0] < 0) + i32::from(p1[0] > right) * 2;
        }
        if c2 & 12 != 0 {
            let a = if c2 < 8 { 0 } else { bottom };
            p2[0] += step(a - p2[1], p2[0] - p1[0], p2[1] - p1[1]);
            p2[1] = a;
            c2 = i32::from(p2[0] < 0) + i32::from(p2[0] > right) * 2;
        }
        if c1 & c2 == 0 && c1 | c2 != 0 {
            if c1 != 0 {
                let a = if c1 == 1 { 0 } else { right };
                p1[1] += step(a - p1[0], p2[1] - p1[1], p2[0] - p1[0]);
                p1[0] = a;
                c1 = 0;
            }
            if c2 != 0 {
                let a = if c2 == 1 { 0 } else { right };
                p2[1] += step(a - p2[0], p2[1] - p1[1], p2[0] - p1[0]);
                p2[0] = a;
                c2 = 0;
            }
        }
    }
    c1 | c2 == 0
}

/// Whether a point lies on a `w` x `h` image.
fn on_image(p: [i64; 2], w: i64, h: i64) -> bool {
    (0..w).contains(&p[0]) && (0..h).contains(&p[1])
}

/// OpenCV's 8-connected `Line` (Bresenham via `LineIterator`, drawn left to right), setting
/// mask pixels to 1.
fn draw_line(mask: &mut [u8], w: usize, h: usize, mut p1: [i64; 2], mut p2: [i64; 2]) {
    let (wi, hi) = (w as i64, h as i64);
    let inside = on_image(p1, wi, hi) && on_image(p2, wi, hi);
    if !inside && !clip_line(wi, hi, &mut p1, &mut p2) {
        return;
    }
    let (mut dx, mut dy) = (p2[0] - p1[0], p2[1] - p1[1]);
    if dx < 0 {
        dx = -dx;
        dy = -dy;
        p1 = p2;
    }
    let sy = if dy < 0 { -1 } else { 1 };
    dy = dy.abs();
    let vertical = dy > dx;
    if vertical {
        std::mem::swap(&mut dx, &mut dy);
    }
    let mut err = dx - 2 * dy;
    let [mut x, mut y] = p1;
    for _ in 0..=dx {
        if on_image([x, y], wi, hi) {
            mask[y as usize * w + x as usize] = 1;
        }
        let minor = err < 0;
        err += -2 * dy + if minor { 2 * dx } else { 0 };
        if vertical {
            y += sy;
            x += i64::from(minor);
        } else {
            x += 1;
            y += if minor { sy } else { 0 };
        }
    }
}

/// `cv2.fillPoly(mask, [points], 1)` (8-connected, no shift): OpenCV 5's edge collection
/// (outline drawn with `Line`, edges built from the clipped ends) and scanline fill with its
/// active-edge list.
fn fill_poly(mask: &mut [u8], w: usize, h: usize, points: &[[i64; 2]]) {
    let (wi, hi) = (w as i64, h as i64);
    let mut edges = Vec::new();
    let mut pt0 = points[points.len() - 1];
    for &pt1 in points {
        draw_line(mask, w, h, pt0, pt1);
        let (mut t0, mut t1) = (pt0, pt1);
        let (mut y0c, mut y1c) = (pt0[1], pt1[1]);
        if !(on_image(t0, wi, hi) && on_image(t1, wi, hi)) {
            clip_line(wi, hi, &mut t0, &mut t1);
            if t0[1] != t1[1] {
                (y0c, y1c) = (t0[1], t1[1]);
            }
        }
        let (x0c, x1c) = (t0[0] << XY_SHIFT, t1[0] << XY_SHIFT);
        if pt0[1] != pt1[1] {
            let dx = (x1c - x0c) / (y1c - y0c);
            let (y0, y1, x) = if pt0[1] < pt1[1] {
                (pt0[1], pt1[1], x0c + (pt0[1] - y0c) * dx)
            } else {
                (pt1[1], pt0[1], x1c + (pt1[1] - y1c) * dx)
            };
            edges.push(PolyEdge {
                y0,
                y1,
                x,
                dx,
                next: NIL,
            });
        }
        pt0 = pt1;
    }
    fill_edges(mask, w, h, edges);
}

/// OpenCV's `FillEdgeCollection`: scanlines from the top edge down, pairs of active edges
/// filled between `ceil(left)` and `floor(right)`, the active list kept sorted by bubble sort.
fn fill_edges(mask: &mut [u8], w: usize, h: usize, mut edges: Vec<PolyEdge>) {
    let total = edges.len();
    if total < 2 {
        return;
    }
    let (mut y_min, mut y_max) = (i64::MAX, i64::MIN);
    let (mut x_min, mut x_max) = (i64::MAX, i64::MIN);
    for e in &edges {
        let x1 = e.x + (e.y1 - e.y0) * e.dx;
        y_min = y_min.min(e.y0);
        y_max = y_max.max(e.y1);
        x_min = x_min.min(e.x).min(x1);
        x_max = x_max.max(e.x).max(x1);
    }
    let (wi, hi) = (w as i64, h as i64);
    if y_max < 0 || y_min >= hi || x_max < 0 || x_min >= wi << XY_SHIFT {
        return;
    }
    edges.sort_by_key(|e| (e.y0, e.x, e.dx));
    let first_y = edges[0].y0;
    let sentinel = PolyEdge {
        y0: i64::from(i32::MAX),
        y1: 0,
        x: 0,
        dx: 0,
        next: NIL,
    };
    edges.push(sentinel);
    let head = edges.len();
    edges.push(sentinel);
    let mut i = 0;
    for y in first_y..y_max.min(hi) {
        let mut prelast = head;
        let mut last = edges[head].next;
        let mut draw = false;
        while last != NIL || edges[i].y0 == y {
            if last != NIL && edges[last].y1 == y {
                edges[prelast].next = edges[last].next;
                last = edges[last].next;
                continue;
            }
            let keep = prelast;
            if last != NIL && (edges[i].y0 > y || edges[last].x < edges[i].x) {
                prelast = last;
                last = edges[last].next;
            } else if i < total {
                edges[prelast].next = i;
                edges[i].next = last;
                prelast = i;
                i += 1;
            } else {
                break;
            }
            if draw {
                if y >= 0 {
                    let (a, b) = (edges[keep].x, edges[prelast].x);
                    let (lo, hi_x) = if a > b { (b, a) } else { (a, b) };
                    let x1 = (lo + (1 << XY_SHIFT) - 1) >> XY_SHIFT;
                    let x2 = hi_x >> XY_SHIFT;
                    if x1 < wi && x2 >= 0 {
                        let (x1, x2) = (x1.max(0) as usize, x2.min(wi - 1) as usize);
                        if x1 <= x2 {
                            mask[y as usize * w + x1..=y as usize * w + x2].fill(1);
                        }
                    }
                }
                edges[keep].x += edges[keep].dx;
                edges[prelast].x += edges[prelast].dx;
            }
            draw = !draw;
        }
        bubble_sort_active(&mut edges, head);
    }
}

/// The bubble sort of `FillEdgeCollection`'s active list (starting after `head`) by x.
fn bubble_sort_active(edges: &mut [PolyEdge], head: usize) {
    let mut keep = NIL;
    let mut swapped = false;
    loop {
        let mut prelast = head;
        let mut last = edges[head].next;
        while last != NIL && last != keep && edges[last].next != NIL {
            let te = edges[last].next;
            if edges[last].x > edges[te].x {
                edges[prelast].next = te;
                edges[last].next = edges[te].next;
                edges[te].next = last;
                prelast = te;
                swapped = true;
            } else {
                prelast = last;
                last = te;
            }
        }
        keep = prelast;
        if !(swapped && keep != edges[head].next && keep != head) {
            break;
        }
    }
}

/// shapely's `Polygon.area` (GEOS's shifted shoelace formula) of a closed quad in `double`.
fn geos_area(quad: &[[f64; 2]; 4]) -> f64 {
    let ring = [quad[0], quad[1], quad[2], quad[3], quad[0]];
    let x0 = ring[0][0];
    let mut sum = 0.0;
    for i in 1..ring.len() - 1 {
        sum += (ring[i][0] - x0) * (ring[i - 1][1] - ring[i + 1][1]);
    }
    (sum / 2.0).abs()
}

/// shapely's `Polygon.length`: the sum of the edge lengths, in order.
fn geos_length(quad: &[[f64; 2]; 4]) -> f64 {
    (0..4)
        .map(|i| {
            let (a, b) = (quad[i], quad[(i + 1) % 4]);
            let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
            (dx * dx + dy * dy).sqrt()
        })
        .sum()
}

/// `DBPostProcess.unclip`: grows the box by `area * ratio / perimeter` with pyclipper
/// (`PyclipperOffset`, `JT_ROUND`, `ET_CLOSEDPOLYGON`, arc tolerance 0.25; the corners
/// truncated to integers) and returns the points of the result in pyclipper's order.
fn unclip(quad: &Quad, ratio: f64) -> Vec<[i64; 2]> {
    let q = quad.map(|[x, y]| [f64::from(x), f64::from(y)]);
    let distance = geos_area(&q) * ratio / geos_length(&q);
    let path: Vec<[i64; 2]> = quad.iter().map(|&[x, y]| [x as i64, y as i64]).collect();
    clipper_offset_round(&path, distance)
        .map(clipper_union_ring)
        .unwrap_or_default()
}

/// Clipper's `Round`: half away from zero.
fn clipper_round(v: f64) -> i64 {
    if v < 0.0 {
        (v - 0.5) as i64
    } else {
        (v + 0.5) as i64
    }
}

/// Clipper's `Area` (positive for its "outer" orientation).
fn clipper_area(ring: &[[i64; 2]]) -> f64 {
    let n = ring.len();
    if n < 3 {
        return 0.0;
    }
    let mut a = 0.0;
    let mut j = n - 1;
    for i in 0..n {
        a += (ring[j][0] as f64 + ring[i][0] as f64) * (ring[j][1] as f64 - ring[i][1] as f64);
        j = i;
    }
    -a * 0.5
}

/// Clipper 6.4.2's `GetUnitNormal`.
fn unit_normal(p1: [i64; 2], p2: [i64; 2]) -> [f64; 2] {
    if p1 == p2 {
        return [0.0, 0.0];
    }
    let (dx, dy) = ((p2[0] - p1[0]) as f64, (p2[1] - p1[1]) as f64);
    let f = 1.0 / (dx * dx + dy * dy).sqrt();
    [dy * f, -dx * f]
}

/// Clipper 6.4.2's `ClipperOffset` for one closed polygon with round joins (`AddPath`,
/// `FixOrientations`, `DoOffset`, `OffsetPoint`, `DoRound`): the offset outline before the
/// final union, or `None` when the path has fewer than three distinct points.
fn clipper_offset_round(path: &[[i64; 2]], delta: f64) -> Option<Vec<[i64; 2]>> {
    let mut hi = path.len().checked_sub(1)?;
    while hi > 0 && path[0] == path[hi] {
        hi -= 1;
    }
    let mut poly = vec![path[0]];
    for &p in &path[1..=hi] {
        if *poly.last().expect("the contour is not empty") != p {
            poly.push(p);
        }
    }
    if poly.len() < 3 {
        return None;
    }
    if clipper_area(&poly) < 0.0 {
        poly.reverse();
    }
    if delta.abs() < 1e-20 {
        return Some(poly);
    }
    let tolerance = if 0.25 > delta.abs() * 0.25 {
        delta.abs() * 0.25
    } else {
        0.25
    };
    let mut steps = PI / (1.0 - tolerance / delta.abs()).acos();
    steps = steps.min(delta.abs() * PI);
    let (sin, cos) = ((2.0 * PI / steps).sin(), (2.0 * PI / steps).cos());
    let sin = if delta < 0.0 { -sin } else { sin };
    let steps_per_rad = steps / (2.0 * PI);
    let n = poly.len();
    let normals: Vec<[f64; 2]> = (0..n)
        .map(|j| unit_normal(poly[j], poly[(j + 1) % n]))
        .collect();
    let at = |p: [i64; 2], nrm: [f64; 2]| {
        [
            clipper_round(p[0] as f64 + nrm[0] * delta),
            clipper_round(p[1] as f64 + nrm[1] * delta),
        ]
    };
    let mut out = Vec::new();
    let mut k = n - 1;
    for j in 0..n {
        let (nk, nj, src) = (normals[k], normals[j], poly[j]);
        let mut sin_a = nk[0] * nj[1] - nj[0] * nk[1];
        if (sin_a * delta).abs() < 1.0 {
            if nk[0] * nj[0] + nj[1] * nk[1] > 0.0 {
                // Nearly straight: one point, and `k` stays (Clipper returns early here).
                out.push(at(src, nk));
                continue;
            }
        } else {
            sin_a = sin_a.clamp(-1.0, 1.0);
        }
        if sin_a * delta < 0.0 {
            out.push(at(src, nk));
            out.push(src);
            out.push(at(src, nj));
        } else {
            let a = sin_a.atan2(nk[0] * nj[0] + nk[1] * nj[1]);
            let count = clipper_round(steps_per_rad * a.abs()).max(1);
            let [mut x, mut y] = nk;
            for _ in 0..count {
                out.push(at(src, [x, y]));
                let x2 = x;
                x = x * cos - sin * y;
                y = x2 * sin + y * cos;
            }
            out.push(at(src, nj));
        }
        k = j;
    }
    Some(out)
}

/// Clipper's union (positive fill) of one convex offset outline, as pyclipper returns it:
/// duplicate and collinear points removed, the outer orientation, and (as Clipper's sweep
/// leaves it for a convex polygon) ending at the topmost point, the rightmost of equals.
fn clipper_union_ring(mut ring: Vec<[i64; 2]>) -> Vec<[i64; 2]> {
    let redundant = |r: &[[i64; 2]], i: usize| {
        let n = r.len();
        let (p, c, q) = (r[(i + n - 1) % n], r[i], r[(i + 1) % n]);
        c == q || c == p || (p[1] - c[1]) * (c[0] - q[0]) == (p[0] - c[0]) * (c[1] - q[1])
    };
    while ring.len() > 2 {
        match (0..ring.len()).find(|&i| redundant(&ring, i)) {
            Some(i) => {
                ring.remove(i);
            }
            None => break,
        }
    }
    if ring.len() < 3 {
        return Vec::new();
    }
    if clipper_area(&ring) < 0.0 {
        ring.reverse();
    }
    let top = (0..ring.len())
        .min_by_key(|&i| (ring[i][1], -ring[i][0]))
        .expect("the ring has three points");
    ring.rotate_left(top + 1);
    ring
}

/// numpy's `argsort` of four `int32` keys on an AVX-512 x86-64 machine (x86-simd-sort's
/// bitonic network; equal keys are not kept in input order).
fn argsort4(keys: [f32; 4]) -> [usize; 4] {
    const NETWORK: [(usize, usize); 6] = [(0, 1), (2, 3), (0, 3), (1, 2), (0, 1), (2, 3)];
    let mut k = keys;
    let mut idx = [0, 1, 2, 3];
    for (i, j) in NETWORK {
        if k[i] > k[j] {
            k.swap(i, j);
            idx.swap(i, j);
        }
    }
    idx
}

/// `TextDetector.order_points_clockwise`: the two leftmost corners (by numpy's argsort of x)
/// ordered by y give top-left and bottom-left, the other two top-right and bottom-right.
fn order_points_clockwise(q: &Quad) -> Quad {
    let by_x = argsort4(q.map(|p| p[0]));
    let pair = |a: [f32; 2], b: [f32; 2]| if b[1] < a[1] { (b, a) } else { (a, b) };
    let (tl, bl) = pair(q[by_x[0]], q[by_x[1]]);
    let (tr, br) = pair(q[by_x[2]], q[by_x[3]]);
    [tl, tr, br, bl]
}

/// `np.linalg.norm(a - b)` of two `float32` points: `sqrt(dx*dx + dy*dy)` in `float32`.
fn norm32(a: [f32; 2], b: [f32; 2]) -> f32 {
    let (dx, dy) = (a[0] - b[0], a[1] - b[1]);
    (dx * dx + dy * dy).sqrt()
}

// ---------------------------------------------------------------------------------------------
// Reading order, crop size, CTC.

/// rapidocr's `sorted_boxes`: a stable sort by the top-left corner's (y, x), then one bubble
/// pass moving a box before its predecessors while their top-left y differ by less than 10
/// and it is further left.
pub fn sort_boxes(boxes: &mut [Quad]) {
    boxes.sort_by(|a, b| {
        (a[0][1], a[0][0])
            .partial_cmp(&(b[0][1], b[0][0]))
            .unwrap_or(Ordering::Equal)
    });
    for i in 0..boxes.len().saturating_sub(1) {
        for j in (0..=i).rev() {
            let (a, b) = (boxes[j][0], boxes[j + 1][0]);
            if (b[1] - a[1]).abs() < 10.0 && b[0] < a[0] {
                boxes.swap(j, j + 1);
            } else {
                break;
            }
        }
    }
}

/// The crop size rapidocr takes for a box (corners top-left, top-right, bottom-right,
/// bottom-left): `(int(max(|p0 - p1|, |p2 - p3|)), int(max(|p0 - p3|, |p1 - p2|)))` with the
/// lengths in `float32` as numpy computes them.
pub fn crop_size(quad: &Quad) -> (usize, usize) {
    let [p0, p1, p2, p3] = *quad;
    let w = norm32(p0, p1).max(norm32(p2, p3));
    let h = norm32(p0, p3).max(norm32(p1, p2));
    (w as usize, h as usize)
}

/// numpy's pairwise summation of `float64` values (`np.add.reduce`, blocks of 8).
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        return a.iter().fold(0.0, |s, &v| s + v);
    }
    if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let whole = n - n % 8;
        for block in a[8..whole].chunks_exact(8) {
            for (acc, &v) in r.iter_mut().zip(block) {
                *acc += v;
            }
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &v in &a[whole..] {
            res += v;
        }
        return res;
    }
    let half = n / 2 - (n / 2) % 8;
    pairwise_sum(&a[..half]) + pairwise_sum(&a[half..])
}

/// CTC greedy decoding of `probs` (`steps` x `classes`, row-major): per step the argmax (first
/// maximum on ties) and its probability; a step is kept when its class differs from the
/// previous step's and is not 0 (blank). Returns the kept class ids and the mean of their
/// probabilities (numpy's `float64` mean, rounded to `f32`; 0.0 when none is kept). Only the
/// complete rows of `probs` are read.
pub fn ctc_greedy(probs: &[f32], steps: usize, classes: usize) -> (Vec<usize>, f32) {
    if classes == 0 {
        return (Vec::new(), 0.0);
    }
    let mut ids = Vec::new();
    let mut kept = Vec::new();
    let mut prev = None;
    for row in probs.chunks_exact(classes).take(steps) {
        let (mut best, mut best_p) = (0, row[0]);
        for (i, &p) in row.iter().enumerate().skip(1) {
            if p > best_p {
                best = i;
                best_p = p;
            }
        }
        if prev != Some(best) && best != 0 {
            ids.push(best);
            kept.push(f64::from(best_p));
        }
        prev = Some(best);
    }
    let score = if kept.is_empty() {
        0.0
    } else {
        pairwise_sum(&kept) / kept.len() as f64
    };
    (ids, score as f32)
}

#[cfg(test)]
mod tests {
    //! Against `tests/fixtures/models/ocr_geometry.json`, written by `make_ocr_geometry.py` with
    //! the real OpenCV, pyclipper, shapely, numpy and rapidocr code (see its docstring for the
    //! input formulas recomputed here).

    use super::*;
    use serde_json::Value;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/models/ocr_geometry.json"
    );
    const DET_MAP: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/models/ocr_det_output.bin"
    );

    fn fixture() -> Value {
        let text = std::fs::read_to_string(FIXTURE).expect("read ocr_geometry.json");
        serde_json::from_str(&text).expect("parse ocr_geometry.json")
    }

    fn int(v: &Value) -> i64 {
        v.as_i64().expect("an integer")
    }

    fn num(v: &Value) -> f64 {
        v.as_f64().expect("a number")
    }

    /// A float64 stored as its shortest round-trip string (parsed correctly rounded).
    fn exact(v: &Value) -> f64 {
        v.as_str().expect("a string").parse().expect("a float")
    }

    fn arr(v: &Value) -> &Vec<Value> {
        v.as_array().expect("an array")
    }

    fn hash32(x: u32, y: u32, c: u32, seed: u32) -> u32 {
        let mut h = x.wrapping_mul(0x9E37_79B1)
            ^ y.wrapping_mul(0x85EB_CA77)
            ^ c.wrapping_mul(0xC2B2_AE3D)
            ^ seed.wrapping_mul(0x27D4_EB2F);
        h ^= h >> 15;
        h = h.wrapping_mul(0x2C1B_3C6D);
        h ^= h >> 12;
        h = h.wrapping_mul(0x297A_2D39);
        h ^ (h >> 15)
    }

    /// The fixture's test image: `[w, h, ax, ay, ac, noise, seed]`.
    fn make_image(p: &Value) -> Bgr {
        let p: Vec<u64> = arr(p).iter().map(|v| int(v) as u64).collect();
        let (w, h) = (p[0] as usize, p[1] as usize);
        let mut data = Vec::with_capacity(w * h * 3);
        for y in 0..h as u64 {
            for x in 0..w as u64 {
                for c in 0..3u64 {
                    let noise = u64::from(hash32(x as u32, y as u32, c as u32, p[6] as u32));
                    let v = p[2] * x + p[3] * y + p[4] * c + noise % (p[5] + 1);
                    data.push((v % 256) as u8);
                }
            }
        }
        Bgr::new(w, h, data).expect("consistent size")
    }

    /// The fixture's probability map (see the generator's docstring).
    fn make_map(w: usize, h: usize, blobs: &[Value], seed: u32) -> Vec<f32> {
        let blobs: Vec<Vec<f64>> = blobs
            .iter()
            .map(|b| arr(b).iter().map(|v| int(v) as f64).collect())
            .collect();
        let mut out = Vec::with_capacity(w * h);
        for y in 0..h {
            for x in 0..w {
                let (xf, yf) = (x as f64, y as f64);
                let mut p = 0.0f64;
                for b in &blobs {
                    let (cx, cy, a, bb) = (b[0] / 4.0, b[1] / 4.0, b[2] / 4.0, b[3] / 4.0);
                    let (cs, sn) = (b[4] / b[6], b[5] / b[6]);
                    let (pk, sl) = (b[7] / 100.0, b[8] / 100.0);
                    let (dx, dy) = (xf - cx, yf - cy);
                    let u = dx * cs + dy * sn;
                    let v = dy * cs - dx * sn;
                    let d = (u.abs() - a).max(v.abs() - bb);
                    let q = (pk - d * sl).max(0.0).min(pk);
                    p = if b[9] > 0.0 { p.max(q) } else { p.min(1.0 - q) };
                }
                if p > 0.0 {
                    let n =
                        (f64::from(hash32(x as u32, y as u32, 0, seed) % 2001) - 1000.0) / 20000.0;
                    p = (p + n).clamp(0.0, 1.0);
                }
                out.push(p as f32);
            }
        }
        out
    }

    fn fnv1a64(bytes: &[u8]) -> String {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01B3);
        }
        format!("{h:016x}")
    }

    /// Compares an image with a fixture record (`fnv` of the bytes and sample pixels).
    fn check_image(img: &Bgr, rec: &Value, what: &str) {
        for s in arr(&rec["samples"]) {
            let s: Vec<i64> = arr(s).iter().map(int).collect();
            let (x, y) = (s[0] as usize, s[1] as usize);
            let got: Vec<i64> = (0..3).map(|c| i64::from(img.at(x, y, c))).collect();
            assert_eq!(got, s[2..], "{what}: pixel ({x}, {y})");
        }
        assert_eq!(
            fnv1a64(&img.data),
            rec["fnv"].as_str().unwrap(),
            "{what}: bytes"
        );
    }

    fn quad(v: &Value) -> Quad {
        let f: Vec<f32> = arr(v)
            .iter()
            .flat_map(|p| match p.as_array() {
                Some(xy) => xy.iter().map(|c| num(c) as f32).collect(),
                None => vec![num(p) as f32],
            })
            .collect();
        [[f[0], f[1]], [f[2], f[3]], [f[4], f[5]], [f[6], f[7]]]
    }

    fn points(v: &Value) -> Vec<[i64; 2]> {
        arr(v).iter().map(|p| [int(&p[0]), int(&p[1])]).collect()
    }

    #[test]
    fn resize_matches_opencv() {
        let fx = fixture();
        let cases = arr(&fx["resize"]);
        assert!(cases.len() >= 15);
        for case in cases {
            let name = case["src"].as_str().unwrap();
            let img = make_image(&fx["images"][name]);
            let (w, h) = (
                int(&case["size"][0]) as usize,
                int(&case["size"][1]) as usize,
            );
            let out = resize_linear(&img, w, h);
            assert_eq!((out.width, out.height), (w, h));
            check_image(&out, case, &format!("resize {name} to {w}x{h}"));
        }
    }

    #[test]
    fn warp_crop_matches_opencv() {
        let fx = fixture();
        for case in arr(&fx["warp"]) {
            let name = case["src"].as_str().unwrap();
            let img = make_image(&fx["images"][name]);
            let q = quad(&case["quad"]);
            let (w, h) = crop_size(&q);
            assert_eq!(
                [w as i64, h as i64],
                [int(&case["size"][0]), int(&case["size"][1])]
            );
            let m = perspective_transform(&q, w as f32, h as f32).expect("regular quad");
            let want: Vec<f64> = arr(&case["matrix"]).iter().map(exact).collect();
            assert_eq!(m.to_vec(), want, "getPerspectiveTransform of {q:?}");
            let warped = warp_crop(&img, &q, w, h);
            check_image(&warped, case, &format!("warp {name} {q:?}"));
            check_image(&rotate90_ccw(&warped), &case["rot90"], "np.rot90");
            check_image(&rotate180(&warped), &case["rot180"], "ROTATE_180");
            let crop = if h as f64 / w as f64 >= 1.5 {
                rotate90_ccw(&warped)
            } else {
                warped
            };
            check_image(&crop, &case["crop"], "get_rotate_crop_image");
        }
    }

    fn check_db(prob: &[f32], w: usize, h: usize, cases: &Value, name: &str) -> usize {
        let mut n = 0;
        for case in arr(cases) {
            let (dw, dh) = (
                int(&case["dest"][0]) as usize,
                int(&case["dest"][1]) as usize,
            );
            let want: Vec<Quad> = arr(&case["boxes"]).iter().map(quad).collect();
            let got = db_boxes(prob, w, h, dw, dh, &DbParams::default());
            assert_eq!(got, want, "map {name} to {dw}x{dh}");
            n += want.len();
        }
        n
    }

    #[test]
    fn db_boxes_match_rapidocr_on_synthetic_maps() {
        let fx = fixture();
        let mut boxes = 0;
        for m in arr(&fx["db"]).iter().filter(|m| m.get("blobs").is_some()) {
            let (w, h) = (int(&m["w"]) as usize, int(&m["h"]) as usize);
            let prob = make_map(w, h, arr(&m["blobs"]), int(&m["seed"]) as u32);
            let bytes: Vec<u8> = prob.iter().flat_map(|v| v.to_le_bytes()).collect();
            let name = m["name"].as_str().unwrap();
            assert_eq!(
                fnv1a64(&bytes),
                m["map_fnv"].as_str().unwrap(),
                "map {name}"
            );
            boxes += check_db(&prob, w, h, &m["cases"], name);
        }
        assert!(boxes >= 100, "only {boxes} boxes compared");
    }

    #[test]
    fn db_boxes_match_rapidocr_on_the_real_detector_map() {
        let fx = fixture();
        let m = arr(&fx["db"])
            .iter()
            .find(|m| m["name"] == "real_det_160")
            .unwrap();
        let bytes = std::fs::read(DET_MAP).expect("read ocr_det_output.bin");
        let prob: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(prob.len(), 160 * 160);
        assert!(check_db(&prob, 160, 160, &m["cases"], "real") >= 4);
    }

    #[test]
    fn contours_match_opencv() {
        let fx = fixture();
        for case in arr(&fx["contours"]) {
            let (w, h) = (int(&case["w"]) as usize, int(&case["h"]) as usize);
            let (seed, density) = (int(&case["seed"]) as u32, int(&case["density"]) as u32);
            let bits: Vec<u8> = (0..w * h)
                .map(|i| u8::from(hash32((i % w) as u32, (i / w) as u32, 1, seed) % 100 < density))
                .collect();
            let want: Vec<Vec<[i64; 2]>> = arr(&case["contours"]).iter().map(points).collect();
            assert_eq!(find_contours(&bits, w, h), want, "bitmap seed {seed}");
        }
    }

    #[test]
    fn min_area_rect_and_box_points_match_opencv() {
        let fx = fixture();
        for case in arr(&fx["min_area_rect"]) {
            let pts = points(&case["points"]);
            let r = min_area_rect(&pts);
            let want: Vec<f32> = arr(&case["rect"]).iter().map(|v| num(v) as f32).collect();
            assert_eq!(
                vec![r.cx, r.cy, r.width, r.height, r.angle],
                want,
                "{pts:?}"
            );
            assert_eq!(box_points(&r), quad(&case["box"]), "boxPoints of {pts:?}");
        }
    }

    #[test]
    fn fill_poly_matches_opencv() {
        let fx = fixture();
        for case in arr(&fx["fill_poly"]) {
            let (w, h) = (int(&case["w"]) as usize, int(&case["h"]) as usize);
            let pts = points(&case["points"]);
            let mut mask = vec![0u8; w * h];
            fill_poly(&mut mask, w, h, &pts);
            let got: Vec<String> = mask
                .chunks_exact(w)
                .map(|r| r.iter().map(|v| char::from(b'0' + v)).collect())
                .collect();
            let want: Vec<&str> = arr(&case["mask"])
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert_eq!(got, want, "fillPoly {pts:?} on {w}x{h}");
        }
    }

    #[test]
    fn unclip_matches_shapely_and_pyclipper() {
        let fx = fixture();
        for case in arr(&fx["unclip"]) {
            let q = quad(&case["box"]);
            let qd = q.map(|[x, y]| [f64::from(x), f64::from(y)]);
            let (area, length) = (geos_area(&qd), geos_length(&qd));
            assert_eq!(area, exact(&case["area"]), "area of {q:?}");
            assert_eq!(length, exact(&case["length"]), "length of {q:?}");
            assert_eq!(
                area * 1.6 / length,
                exact(&case["distance"]),
                "distance of {q:?}"
            );
            let paths = arr(&case["paths"]);
            assert_eq!(paths.len(), 1);
            assert_eq!(unclip(&q, 1.6), points(&paths[0]), "unclip {q:?}");
        }
    }

    #[test]
    fn sort_boxes_match_rapidocr() {
        let fx = fixture();
        for case in arr(&fx["sort"]) {
            let mut boxes: Vec<Quad> = arr(&case["input"]).iter().map(quad).collect();
            let want: Vec<Quad> = arr(&case["output"]).iter().map(quad).collect();
            sort_boxes(&mut boxes);
            assert_eq!(boxes, want);
        }
    }

    #[test]
    fn crop_size_matches_numpy() {
        let fx = fixture();
        for case in arr(&fx["crop_size"]) {
            let q = quad(&case["quad"]);
            let want = (
                int(&case["size"][0]) as usize,
                int(&case["size"][1]) as usize,
            );
            assert_eq!(crop_size(&q), want, "{q:?}");
        }
    }

    #[test]
    fn ctc_greedy_matches_rapidocr() {
        let fx = fixture();
        for case in arr(&fx["ctc"]) {
            let (steps, classes) = (int(&case["steps"]) as usize, int(&case["classes"]) as usize);
            let probs: Vec<f32> = arr(&case["probs"]).iter().map(|v| num(v) as f32).collect();
            let want: Vec<usize> = arr(&case["ids"]).iter().map(|v| int(v) as usize).collect();
            let (ids, score) = ctc_greedy(&probs, steps, classes);
            assert_eq!(ids, want);
            assert_eq!(score, exact(&case["score"]) as f32);
        }
    }

    #[test]
    fn argsort4_reorders_ties_like_numpy_on_avx512() {
        // numpy 2.4 on an AVX-512 machine: np.argsort([1, 1, 0, 0]) == [3, 2, 1, 0].
        assert_eq!(argsort4([1.0, 1.0, 0.0, 0.0]), [3, 2, 1, 0]);
        assert_eq!(argsort4([1.0, 2.0, 0.0, 0.0]), [3, 2, 0, 1]);
        assert_eq!(argsort4([0.0, 0.0, 0.0, 0.0]), [0, 1, 2, 3]);
        assert_eq!(argsort4([3.0, 1.0, 2.0, 0.0]), [3, 1, 2, 0]);
    }

    #[test]
    fn bad_sizes_are_rejected_without_panicking() {
        assert!(Bgr::new(2, 2, vec![0; 11]).is_none());
        assert!(Bgr::new(usize::MAX, 3, Vec::new()).is_none());
        let img = Bgr::new(2, 1, vec![1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(resize_linear(&img, 0, 5).data.len(), 0);
        assert_eq!(resize_linear(&Bgr::black(0, 0), 2, 2), Bgr::black(2, 2));
        assert_eq!(rotate180(&rotate180(&img)), img);
        assert_eq!(rotate90_ccw(&img).data, vec![4, 5, 6, 1, 2, 3]);
        let flat = [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]];
        assert_eq!(warp_crop(&img, &flat, 3, 2), Bgr::black(3, 2));
        assert!(db_boxes(&[0.9; 10], 4, 3, 8, 6, &DbParams::default()).is_empty());
        assert!(db_boxes(&[0.9; 4], usize::MAX, 2, 8, 6, &DbParams::default()).is_empty());
        assert_eq!(ctc_greedy(&[0.9, 0.1, 0.8, 0.2], 2, 2), (Vec::new(), 0.0));
        assert_eq!(ctc_greedy(&[0.1, 0.9, 0.2], 5, 2), (vec![1], 0.9));
        assert_eq!(ctc_greedy(&[], 0, 0), (Vec::new(), 0.0));
    }

    #[test]
    #[should_panic(expected = "width * height * 3 expected")]
    fn an_inconsistent_image_is_caught() {
        let broken = Bgr {
            width: 4,
            height: 4,
            data: vec![0; 5],
        };
        rotate180(&broken);
    }
}
