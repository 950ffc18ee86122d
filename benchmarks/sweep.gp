# Allreduce sweep plot: gnuplot -e "csv='results/sweep.csv'; png='results/sweep.png'" sweep.gp
# CSV (bench_allreduce_sweep): bytes,ranks,variant,seconds,busbw_gbps,... grouped by variant.
set terminal pngcairo size 1400,560 font ",10" noenhanced
set output png
set datafile separator ","
set datafile columnheaders
set logscale x 2
set autoscale xfix
set format x "%.0b%BB"
set xlabel "message size"
set grid
set key top left
variants = "memcpy mpi mpi-1MiB-pieces gloo kolo-mpi kolo-gloo kolo-shm"
allreduces = "mpi mpi-1MiB-pieces gloo kolo-mpi kolo-gloo kolo-shm"
set format y "%g"
pick(col, v) = strcol(3) eq v ? column(col) : NaN
dash(v) = v eq "memcpy" ? 2 : 1
set multiplot layout 1,2 title "allreduce float32 sum, 2 ranks (median of alternating trials)"
set title "bus bandwidth (memcpy: copy bandwidth per rank, the ceiling)"
set ylabel "GB/s"
set logscale y 10
plot for [i=1:words(variants)] csv using 1:(pick(5, word(variants, i))) with linespoints \
     dashtype dash(word(variants, i)) lc i title word(variants, i)
set title "time per call"
set ylabel "microseconds"
set key top left
plot for [i=1:words(allreduces)] csv using 1:(pick(4, word(allreduces, i)) * 1e6) \
     with linespoints lc (i + 1) title word(allreduces, i)
unset multiplot
