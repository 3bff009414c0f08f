// libFuzzer's entry point for the `LZ4Block` target; its body and its promises are
// `FuzzTargets.lz4Block` in StrataTesting (Fuzz/README.md).
import StrataTesting

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTargets.lz4Block(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
