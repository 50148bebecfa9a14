//! The library's internal checks (layouts, index and pad fusion, the host buffer pool,
//! dtypes, devices, printing), run through `brotensor::internals`.

use brotensor::internals;

#[test]
fn layout_row_major_strides_and_matrix_view() {
    internals::layout::row_major_strides_and_matrix_view();
}

#[test]
fn layout_views_compose() {
    internals::layout::views_compose();
}

#[test]
fn layout_reshape_views_where_strides_allow() {
    internals::layout::reshape_views_where_strides_allow();
}

#[test]
fn layout_row_patterns_of_broadcasts() {
    internals::layout::row_patterns_of_broadcasts();
}

#[test]
fn layout_broadcasting_follows_numpy() {
    internals::layout::broadcasting_follows_numpy();
}

#[test]
fn backend_algebra_index_walks_fuse_where_both_strides_step_as_one() {
    internals::backend_algebra::index_walks_fuse_where_both_strides_step_as_one();
}

#[test]
fn backend_algebra_pads_fuse_outer_dims_into_unpadded_inner_ones() {
    internals::backend_algebra::pads_fuse_outer_dims_into_unpadded_inner_ones();
}

#[test]
fn backend_elementwise_missing_ops_report_not_implemented_with_the_device() {
    internals::backend_elementwise::missing_ops_report_not_implemented_with_the_device();
}

#[test]
fn host_pool_classes_bound_the_waste() {
    internals::host_pool::classes_bound_the_waste();
}

#[test]
#[cfg(target_os = "linux")]
fn host_pool_huge_page_advice_stays_inside_the_allocation() {
    internals::host_pool::huge_page_advice_stays_inside_the_allocation();
}

/// In a child process: the pool is process-wide, and the other tests of this binary take and
/// give buffers while they run.
#[test]
fn host_pool_freed_buffers_are_reused_and_sized_by_class() {
    brotensor_tests::run_child_test(
        "internals::host_pool_reuse_child",
        "BROTENSOR_INTERNALS_CHILD",
        Some("1"),
    );
}

#[test]
#[ignore = "runs in a child process (host_pool_freed_buffers_are_reused_and_sized_by_class)"]
fn host_pool_reuse_child() {
    internals::host_pool::freed_buffers_are_reused_and_sized_by_class();
    println!("child done");
}

#[test]
fn host_pool_absurd_sizes_are_errors_not_aborts() {
    internals::host_pool::absurd_sizes_are_errors_not_aborts();
}

#[test]
fn dtype_sizes_follow_ggml() {
    internals::dtype::sizes_follow_ggml();
}

#[test]
fn device_display_honours_width_and_alignment() {
    internals::device::display_honours_width_and_alignment();
}

#[test]
fn device_parses_and_displays() {
    internals::device::parses_and_displays();
}

#[test]
fn display_a_matrix_prints_its_values_aligned_under_each_other() {
    internals::display::a_matrix_prints_its_values_aligned_under_each_other();
}

#[test]
fn display_large_tensors_show_three_entries_at_each_end() {
    internals::display::large_tensors_show_three_entries_at_each_end();
}

#[test]
fn display_magnitudes_integers_and_special_values() {
    internals::display::magnitudes_integers_and_special_values();
}

#[test]
fn display_sixteen_bit_and_three_d_tensors() {
    internals::display::sixteen_bit_and_three_d_tensors();
}
