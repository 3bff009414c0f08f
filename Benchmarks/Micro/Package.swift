// swift-tools-version: 6.2
// Micro-benchmarks of Strata's hot paths with package-benchmark (wall clock, throughput,
// allocations, retains and releases). Its own package, so neither CI nor strata-bench
// builds it (its first build takes about four and a half minutes). From the repository root:
//   swift package --package-path Benchmarks/Micro benchmark
import PackageDescription

let package = Package(
    name: "StrataMicroBenchmarks",
    dependencies: [
        .package(name: "Strata", path: "../.."),
        // The ecosystem's benchmark harness; MallocInterposer counts allocations.
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "HotPaths",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "StrataTesting", package: "Strata"),
            ],
            path: "Benchmarks/HotPaths",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
