;; Five-day momentum, close / delay(close, 5) - 1, as a WebAssembly signal module.
;; The same values, bit for bit, as the expression `close / delay(close, 5) - 1`
;; (NaN for the first five days and where the earlier close is zero or missing).
;;
;;   alphaloop eval --wasm sandbox/wasm/examples/momentum.wat
(module
  (memory (export "memory") 1)
  ;; The next free byte; the host asks for one block.
  (global $next (mut i32) (i32.const 1024))

  ;; alloc(bytes) -> address: an 8-byte aligned block, growing the memory as needed
  ;; (a failed grow traps, which the host reports as `memory`).
  (func (export "alloc") (param $bytes i32) (result i32)
    (local $at i32) (local $end i32) (local $pages i32)
    (local.set $at (i32.and (i32.add (global.get $next) (i32.const 7)) (i32.const -8)))
    (local.set $end (i32.add (local.get $at) (local.get $bytes)))
    (local.set $pages
      (i32.sub (i32.shr_u (i32.add (local.get $end) (i32.const 65535)) (i32.const 16)) (memory.size)))
    (if (i32.gt_s (local.get $pages) (i32.const 0))
      (then (if (i32.eq (memory.grow (local.get $pages)) (i32.const -1)) (then unreachable))))
    (global.set $next (local.get $end))
    (local.get $at))

  ;; signal(n_dates, n_assets, fields, out) -> 0: field k of asset a on date t is the f64 at
  ;; fields + 8 * ((k * n_assets + a) * n_dates + t), k = 0 open, 1 high, 2 low, 3 close,
  ;; 4 volume; the output of (a, t) goes to out + 8 * (a * n_dates + t).
  (func (export "signal") (param $nd i32) (param $na i32) (param $fields i32) (param $out i32) (result i32)
    (local $close i32) (local $a i32) (local $t i32) (local $i i32) (local $den f64) (local $v f64)
    (local.set $close
      (i32.add (local.get $fields) (i32.mul (i32.mul (i32.const 24) (local.get $nd)) (local.get $na))))
    (block $assets_done
      (loop $each_asset
        (br_if $assets_done (i32.ge_u (local.get $a) (local.get $na)))
        (local.set $t (i32.const 0))
        (block $dates_done
          (loop $each_date
            (br_if $dates_done (i32.ge_u (local.get $t) (local.get $nd)))
            (local.set $v (f64.const nan))
            (if (i32.ge_u (local.get $t) (i32.const 5))
              (then
                (local.set $den
                  (f64.load (i32.add (local.get $close) (i32.shl (i32.sub (local.get $i) (i32.const 5)) (i32.const 3)))))
                (if (f64.ne (local.get $den) (f64.const 0))
                  (then
                    (local.set $v
                      (f64.sub
                        (f64.div
                          (f64.load (i32.add (local.get $close) (i32.shl (local.get $i) (i32.const 3))))
                          (local.get $den))
                        (f64.const 1)))))))
            (f64.store (i32.add (local.get $out) (i32.shl (local.get $i) (i32.const 3))) (local.get $v))
            (local.set $t (i32.add (local.get $t) (i32.const 1)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $each_date)))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (br $each_asset)))
    (i32.const 0)))
