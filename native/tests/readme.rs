//! The README's Rust example is `examples/story.rs` word for word (CI runs the example
//! on stories15M), so the two cannot drift apart.

#[test]
fn readme_shows_the_story_example() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/story.rs")).unwrap();
    let code: String = example.lines().filter(|l| !l.starts_with("//!")).map(|l| format!("{l}\n")).collect();
    assert!(code.lines().count() <= 20, "the README example should stay short");
    assert!(readme.contains(&format!("```rust\n{code}```")), "README.md must show examples/story.rs (less its //! lines) in a rust block");
}
