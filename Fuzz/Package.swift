// swift-tools-version:5.4
// libFuzzer targets for Strata's decoders. Tools version 5.4 on purpose: newer ones rename
// the executable's `main`, and libFuzzer's own `main` then fails to link (see README.md).
import PackageDescription

let package = Package(
    name: "StrataFuzz",
    dependencies: [.package(name: "Strata", path: "..")],
    targets: [
        .executableTarget(name: "WALFramesFuzz", dependencies: [
            .product(name: "WAL", package: "Strata"),
            .product(name: "FileIO", package: "Strata"),
            .product(name: "Codec", package: "Strata"),
        ]),
        .executableTarget(name: "LZ4BlockFuzz", dependencies: [.product(name: "Codec", package: "Strata")]),
        .executableTarget(name: "EnginePageFuzz", dependencies: [
            .product(name: "Engine", package: "Strata"),
            .product(name: "FileIO", package: "Strata"),
            .product(name: "Codec", package: "Strata"),
        ]),
        .executableTarget(name: "RecordDecoderFuzz", dependencies: [.product(name: "Strata", package: "Strata")]),
        .executableTarget(name: "EngineOpenFuzz", dependencies: [
            .product(name: "Engine", package: "Strata"),
            .product(name: "FileIO", package: "Strata"),
            .product(name: "Codec", package: "Strata"),
        ]),
    ]
)
