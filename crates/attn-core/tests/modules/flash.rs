//! Which backends `FlashAttentionOps` is built for.

use attn_core::flash_serves;
use attn_testing::device_for;

#[test]
fn serves_every_backend_the_tests_build_with_and_without_autodiff() {
    // attn-testing turns on this crate's flex, ndarray and wgpu features.
    for name in ["flex", "ndarray", "wgpu"] {
        let device = device_for(name).expect("a backend name");
        assert!(flash_serves(&device), "{name}");
        assert!(flash_serves(&device.autodiff()), "{name} with autodiff");
    }
}
