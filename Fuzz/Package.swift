// swift-tools-version:5.4
// libFuzzer targets for Strata's decoders. Tools version 5.4 on purpose: newer ones rename
// the executable's `main`, and libFuzzer's own `main` then fails to link (see README.md).
import PackageDescription

let package = Package(
    name: "StrataFuzz",
    dependencies: [.package(name: "Strata", path: "..")],
    targets: ["WALFramesFuzz", "LZ4BlockFuzz", "EnginePageFuzz", "EngineOpenFuzz", "RecordDecoderFuzz", "StoreLogFuzz", "StoreFieldsFuzz"].map { name in
        .executableTarget(name: name, dependencies: [.product(name: "StrataTesting", package: "Strata")])
    }
)
