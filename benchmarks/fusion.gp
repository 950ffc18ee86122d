# Fusion sets plot: gnuplot -e "csv='results/fusion.csv'; png='results/fusion.png'" fusion.gp
# CSV (bench_fusion_sets): set,tensors,bytes,backend,kolo_ms,flat_ms,per_tensor_ms,
# kolo_over_flat,kolo_over_per_tensor,... one row per set and backend.
set terminal pngcairo size 1400,560 font ",10" noenhanced
set output png
set datafile separator ","
set datafile columnheaders
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set xtics rotate by -20
set multiplot layout 1,2 title "fusion on real gradient sets, 2 ranks (median of alternating trials)"
set title "time per step"
set ylabel "ms per step (log)"
set logscale y 10
set key top left
plot csv using 5:xtic(sprintf("%s %s", strcol(1), strcol(4))) title "kolo", \
     '' using 6 title "one flat raw allreduce (floor)", \
     '' using 7 title "raw allreduce per tensor"
set title "kolo / raw (below 1: kolo faster)"
set ylabel "time ratio (log)"
set format y "%g"
plot csv using 8:xtic(sprintf("%s %s", strcol(1), strcol(4))) title "kolo / flat", \
     '' using 9 title "kolo / per tensor", \
     1 with lines dashtype 2 lc "black" notitle
unset multiplot
