"""The test binaries that `cargo test --no-run --message-format=json` built, chosen by package
and target: one line per binary, tab-separated: the executable, its package's folder (where
cargo runs it), and the test-name filter (empty for all).

A choice is `PACKAGE:TARGET` or `PACKAGE:TARGET:FILTER`, where TARGET is `lib` for the
package's unit tests or an integration test's name, and `*` every integration test of the
package. A choice that matches no binary is an error, so a renamed test cannot drop out of CI
without a word.
"""

import json
import sys


def main() -> int:
    built = []
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        package = message["package_id"]
        name = message["target"]["name"]
        kinds = message["target"]["kind"]
        # package ids look like `path+file:///…/crates/attn-core#0.1.0` or `…#attn-core@0.1.0`
        package_name = package_name_of(package, message)
        folder = message.get("manifest_path", "").rsplit("/", 1)[0]
        built.append(
            (package_name, "lib" if "lib" in kinds else name, kinds, message["executable"], folder)
        )
    failed = False
    for choice in sys.argv[1:]:
        parts = choice.split(":", 2)
        package, target = parts[0], parts[1]
        test_filter = parts[2] if len(parts) == 3 else ""
        matched = [
            (exe, folder)
            for (p, t, kinds, exe, folder) in built
            if p == package and (t == target or (target == "*" and "test" in kinds))
        ]
        if not matched:
            print(f"no test binary for {choice}", file=sys.stderr)
            failed = True
        for exe, folder in matched:
            print(f"{exe}\t{folder}\t{test_filter}")
    return 1 if failed else 0


def package_name_of(package_id: str, message: dict) -> str:
    """The package's name: the id carries it after `#` (`name@version`), except for a path
    package named as its folder, whose id gives the version alone."""
    tail = package_id.rsplit("#", 1)[-1]
    if "@" in tail:
        return tail.split("@", 1)[0]
    manifest = message.get("manifest_path", "")
    folder = manifest.rsplit("/", 2)[-2] if manifest.count("/") >= 2 else ""
    return folder


if __name__ == "__main__":
    sys.exit(main())
