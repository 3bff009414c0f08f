// swift-tools-version: 6.1
// Strata's throughput benchmarks: a package of their own, so the library never depends on
// a benchmark peer. Run from the repository root:
//   swift run -c release --package-path Benchmarks strata-bench --table
import PackageDescription

let package = Package(
    name: "StrataBenchmarks",
    dependencies: [
        .package(name: "Strata", path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .executableTarget(
            name: "strata-bench",
            dependencies: [
                .product(name: "WAL", package: "Strata"),
                .product(name: "FileIO", package: "Strata"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Sources/StrataBench"
        ),
    ],
    swiftLanguageModes: [.v6]
)
