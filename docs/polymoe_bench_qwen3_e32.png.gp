$d0 << EOD
1 6.16949 12.339
16 10.6574 5.20379
512 54.1606 0.84626
EOD
$d1 << EOD
1 5.664 5.664
16 5.77377 1.40961
512 38.332 0.299469
EOD
$d2 << EOD
1 6.00811 6.00811
16 33.0905 8.07873
512 84.4273 0.659589
EOD
$d3 << EOD
1 5.65577 11.3115
16 6.32619 3.08896
512 34.2899 0.53578
EOD
$d4 << EOD
1 4.185 8.37
16 16.7583 8.18278
512 78.1542 1.22116
EOD
$d5 << EOD
1 5.3196 2.665
16 5.76725 0.705385
512 34.5478 0.135216
EOD
$d6 << EOD
1 5.60857 1.48978
16 7.40579 0.480265
512 45.6406 0.0947131
EOD
$d7 << EOD
1 0.393303 0.393303
16 1.54858 0.387144
512 31.2715 0.244309
EOD
set terminal pngcairo size 1500,640 font 'sans,10' noenhanced
set output 'docs/polymoe_bench_qwen3_e32.png'
set multiplot layout 1,2 title "polymoe_bench: qwen3-30b-a3b (E=32), 2 threads, this machine"
set logscale xy 2
set format y '%g'
set grid
set xlabel 'tokens per forward'
set title 'throughput (GFLOP/s)'
set ylabel 'GFLOP/s'
unset key
set yrange [*:973.535]
set label 1 'fp32 FMA peak 157 GFLOP/s' at graph 0.02, first 180.592
set label 2 'int8 VNNI peak 389.4 GOP/s' at graph 0.02, first 447.826 tc rgb 'red'
plot $d0 using 1:2 with linespoints lw 2 pt 1 dt 1 title 'baseline fp32 / eigen-loop', $d1 using 1:2 with linespoints lw 2 pt 2 dt 1 title 'bf16 / tbb_grouped', $d2 using 1:2 with linespoints lw 2 pt 3 dt 1 title 'bf16 / tiled', $d3 using 1:2 with linespoints lw 2 pt 4 dt 1 title 'fp32 / tbb_grouped', $d4 using 1:2 with linespoints lw 2 pt 5 dt 1 title 'fp32 / tiled', $d5 using 1:2 with linespoints lw 2 pt 6 dt 1 title 'int8_w8a8 / tbb_grouped', $d6 using 1:2 with linespoints lw 2 pt 7 dt 1 title 'mxfp4 / tbb_grouped', $d7 using 1:2 with linespoints lw 2 pt 8 dt 1 title 'peer bf16 / torch-hf-loop', 157.036 with lines dt 2 lw 2 lc rgb 'black' notitle, 389.414 with lines dt 3 lw 2 lc rgb 'red' notitle
unset label
set yrange [*:27.0838]
set title 'effective weight GB/s (distinct experts touched x stored bytes / time)'
set ylabel 'GB/s'
set key outside right top vertical font 'sans,9'
set label 1 'DRAM read 10.8 GB/s' at graph 0.5, first 12.4585
plot $d0 using 1:3 with linespoints lw 2 pt 1 dt 1 title 'baseline fp32 / eigen-loop', $d1 using 1:3 with linespoints lw 2 pt 2 dt 1 title 'bf16 / tbb_grouped', $d2 using 1:3 with linespoints lw 2 pt 3 dt 1 title 'bf16 / tiled', $d3 using 1:3 with linespoints lw 2 pt 4 dt 1 title 'fp32 / tbb_grouped', $d4 using 1:3 with linespoints lw 2 pt 5 dt 1 title 'fp32 / tiled', $d5 using 1:3 with linespoints lw 2 pt 6 dt 1 title 'int8_w8a8 / tbb_grouped', $d6 using 1:3 with linespoints lw 2 pt 7 dt 1 title 'mxfp4 / tbb_grouped', $d7 using 1:3 with linespoints lw 2 pt 8 dt 1 title 'peer bf16 / torch-hf-loop', 10.8335 with lines dt 2 lw 2 lc rgb 'black' notitle
unset multiplot
